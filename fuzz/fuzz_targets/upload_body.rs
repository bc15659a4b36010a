//! A request body through the engine, in chunks cut at fuzzed places and with a
//! declared length that may lie: the object stored is exactly the bytes sent
//! when the length was right, and nothing is stored when it was wrong.
#![no_main]

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use libfuzzer_sys::fuzz_target;
use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::ObjectStore;
use sluice_upload::{Engine, EngineConfig, UploadRequest, UploadSource};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (control, body) = data.split_at(2);
    // control[0]: how the declared length lies; control[1]: where chunks are cut.
    let declared = match control[0] % 4 {
        0 => None,
        1 => Some(body.len() as u64),
        2 => Some(body.len() as u64 + u64::from(control[0] / 4) + 1),
        _ => Some((body.len() as u64).saturating_sub(u64::from(control[0] / 4) + 1)),
    };
    let mut chunks = Vec::new();
    let mut rest = body;
    let mut cut = usize::from(control[1]);
    while !rest.is_empty() {
        cut = (cut * 31 + 7) % 97;
        let n = cut.min(rest.len());
        chunks.push(Ok::<_, io::Error>(Bytes::copy_from_slice(&rest[..n])));
        rest = &rest[n..];
    }
    let dir = tempfile::tempdir().unwrap();
    let mut fs = FsConfig::new(dir.path());
    fs.fsync = false;
    let store: Arc<dyn ObjectStore> = Arc::new(FsStore::open(fs).unwrap());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
        let source = UploadSource::Stream {
            stream: futures::stream::iter(chunks).boxed(),
            length: declared,
        };
        let uploaded = engine.upload(UploadRequest::new("k"), source).await;
        let stored = match store.get_object("k", None).await {
            Ok(output) => Some(
                output
                    .body
                    .try_collect::<Vec<Bytes>>()
                    .await
                    .unwrap()
                    .concat(),
            ),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("reading back: {e}"),
        };
        let truthful = declared.is_none_or(|n| n == body.len() as u64);
        match (truthful, uploaded) {
            (true, Ok(_)) => assert_eq!(stored.as_deref(), Some(body)),
            (true, Err(e)) => panic!("a truthful body failed: {e}"),
            (false, Ok(_)) => panic!(
                "a body of {} bytes declared as {declared:?} was stored",
                body.len()
            ),
            (false, Err(_)) => assert!(stored.is_none(), "a failed upload left an object"),
        }
    });
});
