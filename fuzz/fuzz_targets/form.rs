//! `multipart/form-data` bodies, split into chunks at fuzzed places: the
//! boundary is parsed as the gateway parses it, and the parser, watched by the
//! header window, reads every part without a panic and never buffers a part's
//! headers past the limit.
#![no_main]

use std::io;

use bytes::Bytes;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use sluice_input::form::HeaderWindow;

const HEADER_LIMIT: u64 = 1024;

fuzz_target!(|data: &[u8]| {
    let Some(newline) = data.iter().position(|b| *b == b'\n') else {
        return;
    };
    let Ok(content_type) = std::str::from_utf8(&data[..newline]) else {
        return;
    };
    let Ok(boundary) = multer::parse_boundary(content_type) else {
        return;
    };
    let body = &data[newline + 1..];
    // Chunk sizes from the body's own bytes, so the fuzzer moves the cuts.
    let mut chunks = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = (usize::from(rest[0]) % 64 + 1).min(rest.len());
        chunks.push(Ok::<_, io::Error>(Bytes::copy_from_slice(&rest[..n])));
        rest = &rest[n..];
    }
    let window = HeaderWindow::default();
    let stream = window.watch(
        futures::stream::iter(chunks).boxed(),
        HEADER_LIMIT,
        |limit| io::Error::other(format!("part headers past {limit} bytes")),
    );
    let mut form = multer::Multipart::new(stream, boundary);
    futures::executor::block_on(async {
        for _ in 0..1000 {
            window.open();
            let field = form.next_field().await;
            window.close();
            let Ok(Some(mut field)) = field else { return };
            let _ = (field.name(), field.file_name(), field.content_type());
            while let Ok(Some(_)) = field.chunk().await {}
        }
    });
});
