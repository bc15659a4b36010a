//! Test support for sluice, a dev-dependency only: the connections to the MinIO
//! and the Azurite that `scripts/test.sh` starts ([`minio`], [`azurite`]), an in-memory store that measures what
//! it is sent ([`memory`]), and a wrapper that injects faults and delays
//! ([`faults`]).

pub mod azurite;
pub mod fake_gcs;
pub mod faults;
pub mod memory;
pub mod minio;
pub mod tls;

pub use faults::{Fault, FaultyStore, Op};
pub use memory::MemoryStore;

/// The address of a service `scripts/test.sh` started, from `variable`, or
/// `None` after saying that `test` skips; with `required` (a variable) set to
/// 1, a missing address fails the test instead, so that nothing skips
/// silently in CI.
pub fn announced(test: &str, variable: &str, required: &str, service: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var(required).as_deref() == Ok("1") {
                panic!("{test}: {required}=1 but {variable} is not set");
            }
            eprintln!("SKIPPED {test}: no {service} (run scripts/test.sh, which starts it)");
            None
        }
    }
}

/// Deterministic pseudo-random test data (xorshift), so failures reproduce.
pub fn test_data(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A file generated from definitions (docs tables): asserts that `path` holds
/// `rendered`; with `SLUICE_UPDATE_DOCS` set, writes it first. `update` is the
/// command that regenerates it, for the failure message.
pub fn assert_generated_file(path: &str, rendered: &str, update: &str) {
    if std::env::var_os("SLUICE_UPDATE_DOCS").is_some() {
        std::fs::write(path, rendered).unwrap();
    }
    let written = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        written == rendered,
        "{path} differs from the definitions; run SLUICE_UPDATE_DOCS=1 {update}"
    );
}
