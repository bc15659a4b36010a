//! tus request headers: creation and PATCH headers, Upload-Metadata and
//! Upload-Checksum, then the PATCH checked against an upload of the created
//! length. Nothing may panic; what parses must hold its promises.
#![no_main]

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sluice_tus::headers::{CreateRequest, PatchRequest};
use sluice_tus::{Concat, Metadata, Upload};

const NAMES: [&str; 8] = [
    "upload-length",
    "upload-defer-length",
    "upload-metadata",
    "upload-concat",
    "upload-offset",
    "upload-checksum",
    "content-length",
    "content-type",
];
const MAX_SIZE: u64 = 1 << 40;

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    headers.insert("tus-resumable", HeaderValue::from_static("1.0.0"));
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == b'\n')) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Metadata::parse(text);
        let _ = sluice_tus::UploadChecksum::parse(text);
    }
    let created = CreateRequest::from_headers(&headers, MAX_SIZE);
    if let Ok(created) = &created {
        assert!(created.length.is_none_or(|l| l <= MAX_SIZE));
    }
    let Ok(patch) = PatchRequest::from_headers(&headers) else {
        return;
    };
    let length = created.ok().and_then(|c| c.length);
    let mut upload = Upload::new(
        "0".repeat(32),
        length,
        Metadata::default(),
        Concat::None,
        SystemTime::UNIX_EPOCH,
        Duration::from_secs(3600),
    );
    upload.offset = patch.offset.min(length.unwrap_or(u64::MAX));
    if let Ok(plan) = upload.check_patch(&patch, SystemTime::UNIX_EPOCH, MAX_SIZE) {
        let _ = format!("{plan:?}");
    }
});
