//! Client keys and key templates: any text is accepted or refused without a
//! panic, and a template that parses renders, for any tenant and file name, a
//! key the gateway itself accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_input::keys::{sanitize_segment, validate_client_key, KeyInputs, KeyTemplate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = validate_client_key(text);
    let mut fields = text.splitn(3, '\n');
    let (template, tenant, filename) = (
        fields.next().unwrap_or(""),
        fields.next().unwrap_or(""),
        fields.next().unwrap_or(""),
    );
    let segment = sanitize_segment(filename, "file");
    assert!(!segment.is_empty() && !segment.contains('/'), "{segment:?}");
    let Ok(parsed) = KeyTemplate::parse(template) else {
        return;
    };
    for sharded in [false, true] {
        let key = parsed
            .clone()
            .with_shard_prefix(sharded)
            .render(&KeyInputs {
                tenant,
                filename,
                now: time::macros::datetime!(2026-11-24 10:00 UTC),
                uuid: uuid::Uuid::from_u128(0x0123_4567_89ab_cdef),
            });
        if let Err(reason) = validate_client_key(&key) {
            panic!("template {template:?} rendered {key:?}: {reason}");
        }
    }
});
