//! `Range` headers: a range that parses is well formed, and resolves within
//! any object size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_input::range::{parse_range, RangeSpec};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let size = u64::from_le_bytes(data[..8].try_into().unwrap()) >> (data[0] % 64);
    let Ok(text) = std::str::from_utf8(&data[8..]) else {
        return;
    };
    let Some(spec) = parse_range(text) else {
        return;
    };
    if let RangeSpec::From {
        start,
        last: Some(last),
    } = spec
    {
        assert!(last >= start);
    }
    if let Some((start, end)) = spec.to_byte_range(Some(size)).resolve(size) {
        assert!(
            start <= end && end <= size,
            "{spec:?} in {size}: {start}..{end}"
        );
    }
});
