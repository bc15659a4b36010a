//! The checksum extension: `Upload-Checksum: <algorithm> <base64 digest>` over the
//! body of one PATCH, computed while the body streams.

use base64::Engine as _;
use md5::Digest as _;

use crate::TusError;

/// Algorithms announced in `Tus-Checksum-Algorithm`.
pub const SUPPORTED: &str = "sha1,md5,sha256";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumAlgorithm {
    Sha1,
    Md5,
    Sha256,
}

impl ChecksumAlgorithm {
    fn digest_len(self) -> usize {
        match self {
            ChecksumAlgorithm::Sha1 => 20,
            ChecksumAlgorithm::Md5 => 16,
            ChecksumAlgorithm::Sha256 => 32,
        }
    }
}

/// An expected checksum of one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadChecksum {
    pub algorithm: ChecksumAlgorithm,
    pub digest: Vec<u8>,
}

impl UploadChecksum {
    /// Parses the header's value: 400 for a malformed one, 400 for an algorithm
    /// not supported.
    pub fn parse(header: &str) -> Result<UploadChecksum, TusError> {
        let invalid = |reason: &str| TusError::InvalidHeader {
            header: "Upload-Checksum",
            reason: reason.to_owned(),
        };
        let (name, digest) = header
            .trim()
            .split_once(' ')
            .ok_or_else(|| invalid("expected \"<algorithm> <base64 digest>\""))?;
        let algorithm = match name.to_ascii_lowercase().as_str() {
            "sha1" => ChecksumAlgorithm::Sha1,
            "md5" => ChecksumAlgorithm::Md5,
            "sha256" => ChecksumAlgorithm::Sha256,
            other => return Err(TusError::UnsupportedChecksumAlgorithm(other.to_owned())),
        };
        let digest = base64::engine::general_purpose::STANDARD
            .decode(digest.trim())
            .map_err(|_| invalid("the digest is not base64"))?;
        if digest.len() != algorithm.digest_len() {
            return Err(invalid("the digest has the wrong length for its algorithm"));
        }
        Ok(UploadChecksum { algorithm, digest })
    }

    /// A hasher for the chunk.
    pub fn hasher(&self) -> ChunkHasher {
        match self.algorithm {
            ChecksumAlgorithm::Sha1 => ChunkHasher::Sha1(sha1::Sha1::new()),
            ChecksumAlgorithm::Md5 => ChunkHasher::Md5(md5::Md5::new()),
            ChecksumAlgorithm::Sha256 => ChunkHasher::Sha256(sha2::Sha256::new()),
        }
    }

    /// Whether the hashed chunk matches.
    pub fn matches(&self, hasher: ChunkHasher) -> bool {
        hasher.finish() == self.digest
    }
}

/// Hashes a chunk as it streams.
#[derive(Clone)]
pub enum ChunkHasher {
    Sha1(sha1::Sha1),
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
}

impl ChunkHasher {
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            ChunkHasher::Sha1(h) => h.update(bytes),
            ChunkHasher::Md5(h) => h.update(bytes),
            ChunkHasher::Sha256(h) => h.update(bytes),
        }
    }

    fn finish(self) -> Vec<u8> {
        match self {
            ChunkHasher::Sha1(h) => h.finalize().to_vec(),
            ChunkHasher::Md5(h) => h.finalize().to_vec(),
            ChunkHasher::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_verify_table() {
        // digests of "hello"
        let cases: Vec<(&str, Result<bool, &str>)> = vec![
            ("sha1 qvTGHdzF6KLavt4PO0gs2a6pQ00=", Ok(true)),
            ("md5 XUFAKrxLKna5cZ2REBfFkg==", Ok(true)),
            (
                "sha256 LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=",
                Ok(true),
            ),
            ("SHA1 qvTGHdzF6KLavt4PO0gs2a6pQ00=", Ok(true)),
            ("sha1 AAAAAAAAAAAAAAAAAAAAAAAAAAA=", Ok(false)),
            ("crc32 AAAAAA==", Err("checksum_algorithm_unsupported")),
            ("sha1", Err("invalid_header")),
            ("sha1 !!!", Err("invalid_header")),
            ("md5 qvTGHdzF6KLavt4PO0gs2a6pQ00=", Err("invalid_header")),
        ];
        for (header, expected) in cases {
            match (UploadChecksum::parse(header), expected) {
                (Ok(checksum), Ok(matches)) => {
                    let mut hasher = checksum.hasher();
                    hasher.update(b"hel");
                    hasher.update(b"lo");
                    assert_eq!(checksum.matches(hasher), matches, "{header}");
                }
                (Err(error), Err(code)) => assert_eq!(error.code(), code, "{header}"),
                (got, expected) => panic!("{header}: {got:?} vs {expected:?}"),
            }
        }
    }
}
