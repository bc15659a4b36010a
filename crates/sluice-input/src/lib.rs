//! What clients send, parsed and checked before anything is stored: object keys
//! and the key templates that name uploads ([`keys`]), `Range` headers
//! ([`range`]) and the headers of form parts ([`form`]). Pure functions over
//! bytes and strings, with no server and no store SDK, so that each parser is
//! fuzzed on its own (`fuzz/`, run by `scripts/fuzz.sh`).

pub mod form;
pub mod keys;
pub mod range;
