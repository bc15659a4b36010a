//! Object and part checksums: the algorithms sluice supports (CRC32C and CRC64NVME,
//! both verified by S3 and by the local store), incremental hashing, combining the
//! checksums of consecutive parts into the checksum of the whole, and the base64
//! wire form S3 uses in `x-amz-checksum-*` headers.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use crc_fast::CrcAlgorithm;

/// A checksum algorithm that the store verifies on every write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumAlgorithm {
    /// CRC-32C (Castagnoli), 4 bytes.
    Crc32c,
    /// CRC-64/NVME, 8 bytes.
    Crc64nvme,
}

impl ChecksumAlgorithm {
    fn crc(self) -> CrcAlgorithm {
        match self {
            ChecksumAlgorithm::Crc32c => CrcAlgorithm::Crc32Iscsi,
            ChecksumAlgorithm::Crc64nvme => CrcAlgorithm::Crc64Nvme,
        }
    }

    /// Width of the checksum in bytes.
    pub fn width(self) -> usize {
        match self {
            ChecksumAlgorithm::Crc32c => 4,
            ChecksumAlgorithm::Crc64nvme => 8,
        }
    }

    /// The name used on the command line and in S3 headers (lower case).
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32c => "crc32c",
            ChecksumAlgorithm::Crc64nvme => "crc64nvme",
        }
    }

    /// Checksum of one buffer.
    pub fn checksum(self, data: &[u8]) -> Checksum {
        Checksum {
            algorithm: self,
            value: crc_fast::checksum(self.crc(), data),
        }
    }

    /// The checksum of zero bytes.
    pub fn empty(self) -> Checksum {
        self.checksum(&[])
    }
}

impl fmt::Display for ChecksumAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ChecksumAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "crc32c" => Ok(ChecksumAlgorithm::Crc32c),
            "crc64nvme" => Ok(ChecksumAlgorithm::Crc64nvme),
            other => Err(format!(
                "unknown checksum algorithm {other:?} (expected crc32c or crc64nvme)"
            )),
        }
    }
}

/// A finished checksum value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checksum {
    pub algorithm: ChecksumAlgorithm,
    pub value: u64,
}

impl Checksum {
    /// Big-endian bytes, base64 encoded: the form of `x-amz-checksum-crc32c` and friends.
    pub fn to_base64(&self) -> String {
        let bytes = self.value.to_be_bytes();
        BASE64.encode(&bytes[8 - self.algorithm.width()..])
    }

    /// Parses the base64 wire form. Composite multipart checksums (`xxxx-12`) are
    /// not a checksum of the content and are refused.
    pub fn from_base64(algorithm: ChecksumAlgorithm, text: &str) -> Option<Checksum> {
        let raw = BASE64.decode(text.trim()).ok()?;
        if raw.len() != algorithm.width() {
            return None;
        }
        let mut bytes = [0u8; 8];
        bytes[8 - raw.len()..].copy_from_slice(&raw);
        Some(Checksum {
            algorithm,
            value: u64::from_be_bytes(bytes),
        })
    }

    /// The checksum of consecutive pieces of data, from each piece's checksum and
    /// length, in order: the whole object's checksum from its parts' or its
    /// ranges'. None when a piece has none (or there are no pieces).
    pub fn combine_in_order(
        pieces: impl IntoIterator<Item = (Option<Checksum>, u64)>,
    ) -> Option<Checksum> {
        let mut total: Option<Checksum> = None;
        for (sum, len) in pieces {
            let sum = sum?;
            total = Some(match total {
                None => sum,
                Some(t) => t.combine(sum, len),
            });
        }
        total
    }

    /// The checksum of `self`'s data followed by `next`'s data, where `next` covers
    /// `next_len` bytes. Both must use the same algorithm.
    pub fn combine(self, next: Checksum, next_len: u64) -> Checksum {
        debug_assert_eq!(self.algorithm, next.algorithm);
        if next_len == 0 {
            return self;
        }
        Checksum {
            algorithm: self.algorithm,
            value: crc_fast::checksum_combine(
                self.algorithm.crc(),
                self.value,
                next.value,
                next_len,
            ),
        }
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.to_base64())
    }
}

/// Incremental checksum over a sequence of buffers.
#[derive(Clone)]
pub struct Hasher {
    algorithm: ChecksumAlgorithm,
    digest: crc_fast::Digest,
}

impl Hasher {
    pub fn new(algorithm: ChecksumAlgorithm) -> Self {
        Hasher {
            algorithm,
            digest: crc_fast::Digest::new(algorithm.crc()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.digest.update(data);
    }

    pub fn finish(&self) -> Checksum {
        Checksum {
            algorithm: self.algorithm,
            value: self.digest.finalize(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Check values from the CRC catalogue for "123456789".
        let cases = [
            (ChecksumAlgorithm::Crc32c, 0xe306_9283_u64, "4waSgw=="),
            (
                ChecksumAlgorithm::Crc64nvme,
                0xae8b_1486_0a79_9888,
                "rosUhgp5mIg=",
            ),
        ];
        for (algorithm, value, b64) in cases {
            let sum = algorithm.checksum(b"123456789");
            assert_eq!(sum.value, value, "{algorithm}");
            assert_eq!(sum.to_base64(), b64, "{algorithm}");
            assert_eq!(Checksum::from_base64(algorithm, b64), Some(sum));
        }
    }

    #[test]
    fn combine_equals_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for algorithm in [ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64nvme] {
            let whole = algorithm.checksum(&data);
            for split in [0, 1, 4096, 99_999, 100_000] {
                let (a, b) = data.split_at(split);
                let combined = algorithm
                    .checksum(a)
                    .combine(algorithm.checksum(b), b.len() as u64);
                assert_eq!(combined, whole, "{algorithm} split at {split}");
            }
            let pieces = data
                .chunks(30_001)
                .map(|c| (Some(algorithm.checksum(c)), c.len() as u64));
            assert_eq!(Checksum::combine_in_order(pieces), Some(whole));
            let mut hasher = Hasher::new(algorithm);
            for chunk in data.chunks(777) {
                hasher.update(chunk);
            }
            assert_eq!(hasher.finish(), whole);
        }
    }

    #[test]
    fn malformed_wire_values_are_refused() {
        assert_eq!(
            Checksum::from_base64(ChecksumAlgorithm::Crc32c, "not base64!"),
            None
        );
        assert_eq!(
            Checksum::from_base64(ChecksumAlgorithm::Crc32c, "4waSgw==-3"),
            None
        );
        assert_eq!(
            Checksum::from_base64(ChecksumAlgorithm::Crc64nvme, "4waSgw=="),
            None
        );
    }
}
