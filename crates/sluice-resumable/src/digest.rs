//! The representation digest a client asked its upload to be checked against
//! (RFC 9530's `Repr-Digest` on the draft's creation) and the running hash of
//! the bytes committed so far. The hash state is kept in the upload's record
//! between requests (SHA-256's serialised state, CRC32C's value), so any
//! gateway can take the next request; a request's body is hashed as it is
//! read, and the state is committed only when every byte hashed was committed.

use std::io;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use serde::{Deserialize, Serialize};
use sha2::digest::common::hazmat::SerializableState;
use sha2::Digest as _;
use sluice_store::{Checksum, ChecksumAlgorithm};

/// The digests an upload can be checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestAlgorithm {
    #[serde(rename = "sha-256")]
    Sha256,
    #[serde(rename = "crc32c")]
    Crc32c,
}

impl DigestAlgorithm {
    /// The name RFC 9530's registry gives it.
    pub fn name(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha-256",
            DigestAlgorithm::Crc32c => "crc32c",
        }
    }

    pub fn from_name(name: &str) -> Option<DigestAlgorithm> {
        match name {
            "sha-256" => Some(DigestAlgorithm::Sha256),
            "crc32c" => Some(DigestAlgorithm::Crc32c),
            _ => None,
        }
    }

    fn width(self) -> usize {
        match self {
            DigestAlgorithm::Sha256 => 32,
            DigestAlgorithm::Crc32c => 4,
        }
    }
}

/// What the whole upload must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedDigest {
    pub algorithm: DigestAlgorithm,
    pub value: Vec<u8>,
}

impl WantedDigest {
    /// None when `value` cannot be a digest of `algorithm` (its length).
    pub fn new(algorithm: DigestAlgorithm, value: Vec<u8>) -> Option<WantedDigest> {
        (value.len() == algorithm.width()).then_some(WantedDigest { algorithm, value })
    }
}

/// An upload's wanted digest and the hash of its committed bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digesting {
    pub algorithm: DigestAlgorithm,
    /// The wanted digest, base64.
    wanted: String,
    /// The running hash's state, base64.
    state: String,
}

impl Digesting {
    /// The check of `wanted`, over no bytes yet.
    pub fn new(wanted: &WantedDigest) -> Digesting {
        let mut digesting = Digesting {
            algorithm: wanted.algorithm,
            wanted: BASE64.encode(&wanted.value),
            state: String::new(),
        };
        digesting.commit(&Running::start(wanted.algorithm));
        digesting
    }

    /// Back to no bytes (an upload that starts again).
    pub(crate) fn restart(&mut self) {
        self.commit(&Running::start(self.algorithm));
    }

    pub(crate) fn running(&self) -> Result<Running, String> {
        let bytes = BASE64
            .decode(&self.state)
            .map_err(|e| format!("the digest state: {e}"))?;
        Running::resume(self.algorithm, &bytes)
            .ok_or_else(|| "the digest state is unreadable".into())
    }

    pub(crate) fn commit(&mut self, running: &Running) {
        self.state = BASE64.encode(running.state());
    }

    /// Whether `running`, over every byte of the upload, is the wanted digest.
    pub(crate) fn matches(&self, running: &Running) -> bool {
        BASE64
            .decode(&self.wanted)
            .is_ok_and(|wanted| wanted == running.finish())
    }

    /// The wanted digest as `Repr-Digest` carries it.
    pub fn wanted_base64(&self) -> &str {
        &self.wanted
    }
}

/// A hash in progress.
#[derive(Clone)]
pub(crate) enum Running {
    Sha256(Box<sha2::Sha256>),
    Crc32c(Checksum),
}

impl Running {
    fn start(algorithm: DigestAlgorithm) -> Running {
        match algorithm {
            DigestAlgorithm::Sha256 => Running::Sha256(Box::default()),
            DigestAlgorithm::Crc32c => Running::Crc32c(ChecksumAlgorithm::Crc32c.checksum(b"")),
        }
    }

    fn resume(algorithm: DigestAlgorithm, state: &[u8]) -> Option<Running> {
        match algorithm {
            DigestAlgorithm::Sha256 => {
                let serialized = state.try_into().ok()?;
                sha2::Sha256::deserialize(serialized)
                    .ok()
                    .map(|h| Running::Sha256(Box::new(h)))
            }
            DigestAlgorithm::Crc32c => {
                let value = u64::from_be_bytes(state.try_into().ok()?);
                Some(Running::Crc32c(Checksum {
                    algorithm: ChecksumAlgorithm::Crc32c,
                    value,
                }))
            }
        }
    }

    fn state(&self) -> Vec<u8> {
        match self {
            Running::Sha256(hash) => hash.serialize().to_vec(),
            Running::Crc32c(sum) => sum.value.to_be_bytes().to_vec(),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Running::Sha256(hash) => hash.update(bytes),
            Running::Crc32c(sum) => {
                let next = ChecksumAlgorithm::Crc32c.checksum(bytes);
                *sum = sum.combine(next, bytes.len() as u64);
            }
        }
    }

    fn finish(&self) -> Vec<u8> {
        match self {
            Running::Sha256(hash) => hash.as_ref().clone().finalize().to_vec(),
            Running::Crc32c(sum) => (sum.value as u32).to_be_bytes().to_vec(),
        }
    }
}

/// A body hashed as it is read: the hash and how many bytes went in.
pub(crate) struct Feed {
    shared: Arc<Mutex<(Running, u64)>>,
}

impl Feed {
    /// `body`, its bytes fed to `running` as they pass.
    pub(crate) fn wrap(
        running: Running,
        body: BoxStream<'static, io::Result<Bytes>>,
    ) -> (Feed, BoxStream<'static, io::Result<Bytes>>) {
        let shared = Arc::new(Mutex::new((running, 0u64)));
        let fed = shared.clone();
        let body = body
            .map(move |item| {
                if let Ok(bytes) = &item {
                    let mut guard = fed.lock().unwrap_or_else(|p| p.into_inner());
                    guard.0.update(bytes);
                    guard.1 += bytes.len() as u64;
                }
                item
            })
            .boxed();
        (Feed { shared }, body)
    }

    /// The hash so far and the bytes it covers.
    pub(crate) fn taken(&self) -> (Running, u64) {
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_kept_between_requests_hashes_as_one_pass() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let sha = sha2::Sha256::digest(&data).to_vec();
        let crc = (ChecksumAlgorithm::Crc32c.checksum(&data).value as u32)
            .to_be_bytes()
            .to_vec();
        for (algorithm, whole) in [
            (DigestAlgorithm::Sha256, sha),
            (DigestAlgorithm::Crc32c, crc),
        ] {
            let wanted = WantedDigest::new(algorithm, whole.clone()).unwrap();
            let mut digesting = Digesting::new(&wanted);
            for piece in data.chunks(7_777) {
                // Each piece a request: the state read back from the record, fed, committed.
                let json = serde_json::to_string(&digesting).unwrap();
                digesting = serde_json::from_str(&json).unwrap();
                let mut running = digesting.running().unwrap();
                running.update(piece);
                digesting.commit(&running);
            }
            assert!(
                digesting.matches(&digesting.running().unwrap()),
                "{algorithm:?}"
            );
            let mut other = digesting.running().unwrap();
            other.update(b"x");
            assert!(!digesting.matches(&other), "{algorithm:?}");
        }
        assert!(WantedDigest::new(DigestAlgorithm::Sha256, vec![0; 31]).is_none());
    }
}
