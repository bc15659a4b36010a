//! What sluice's concepts are called in Azure Blob: a multipart part as a
//! block id, an S3-style metadata name as an Azure one, and sluice's own
//! metadata entries (the object's checksum).
//!
//! **Block ids.** All the uncommitted blocks of one blob must have ids of one
//! length, at most 64 bytes before base64. sluice's are 39 bytes: the upload
//! id (16), the part number (2, big-endian), when the block was staged
//! (microseconds since 1970, 8: a part sent again has a new id, and the
//! newest one is the part), whether the CRCs are known (1), the part's
//! CRC-64/NVME (8) and CRC-32C (4). Azure verifies the CRC-64 as
//! the block arrives (`x-ms-content-crc64`), so the CRCs read back from an id
//! are the part's own: `list_parts` reports them and completion combines them
//! into the object's checksum without reading a byte. A part copied from
//! another blob has no CRCs (flag 0).
//!
//! **Metadata names.** Azure takes C# identifiers (letters, digits, `_`, not
//! starting with a digit, case kept but compared without case); S3's names
//! also take `-`, and sluice's are lower case. A name that is an identifier
//! without `__` is kept as it is, so other programs read it; any other is
//! written `sluice__u_` and its bytes with everything but letters and digits
//! as `_XX` (hex). sluice's own entries are `sluice__i_NAME`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::checksum::ChecksumAlgorithm;
pub(crate) use crate::rest::body::PartCrcs;

/// A part as a block: which upload, which part, and its CRCs when known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockId {
    pub upload: [u8; 16],
    pub part_number: u16,
    pub staged_at_micros: u64,
    pub crcs: Option<PartCrcs>,
}

const BLOCK_ID_LEN: usize = 39;

impl BlockId {
    pub fn encode(&self) -> String {
        let mut raw = [0u8; BLOCK_ID_LEN];
        raw[..16].copy_from_slice(&self.upload);
        raw[16..18].copy_from_slice(&self.part_number.to_be_bytes());
        raw[18..26].copy_from_slice(&self.staged_at_micros.to_be_bytes());
        if let Some(crcs) = self.crcs {
            raw[26] = 1;
            raw[27..35].copy_from_slice(&crcs.crc64nvme.to_be_bytes());
            raw[35..39].copy_from_slice(&crcs.crc32c.to_be_bytes());
        }
        BASE64.encode(raw)
    }

    /// An id sluice made, or `None` for anyone else's block.
    pub fn decode(text: &str) -> Option<BlockId> {
        let raw = BASE64.decode(text).ok()?;
        if raw.len() != BLOCK_ID_LEN {
            return None;
        }
        let upload: [u8; 16] = raw[..16].try_into().ok()?;
        let part_number = u16::from_be_bytes([raw[16], raw[17]]);
        let staged_at_micros = u64::from_be_bytes(raw[18..26].try_into().ok()?);
        let crcs = match raw[26] {
            0 => None,
            1 => Some(PartCrcs {
                crc64nvme: u64::from_be_bytes(raw[27..35].try_into().ok()?),
                crc32c: u32::from_be_bytes(raw[35..39].try_into().ok()?),
            }),
            _ => return None,
        };
        Some(BlockId {
            upload,
            part_number,
            staged_at_micros,
            crcs,
        })
    }
}

/// An upload id (32 hex digits, a UUID's) as the 16 bytes block ids hold.
pub(crate) fn upload_bytes(upload_id: &str) -> Option<[u8; 16]> {
    uuid::Uuid::try_parse(upload_id).ok().map(|u| *u.as_bytes())
}

const ESCAPED: &str = "sluice__u_";
const OWN: &str = "sluice__i_";

/// The metadata entry that holds an object's full checksum.
pub(crate) fn checksum_entry(algorithm: ChecksumAlgorithm) -> String {
    format!("{OWN}{}", algorithm.name())
}

/// A user metadata name as Azure stores it.
pub(crate) fn metadata_name_out(name: &str) -> String {
    let plain = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.contains("__");
    if plain {
        return name.to_string();
    }
    let mut out = String::from(ESCAPED);
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() {
            out.push(byte as char);
        } else {
            out.push_str(&format!("_{byte:02X}"));
        }
    }
    out
}

/// What a stored metadata name is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StoredName {
    /// A user's, as it was given.
    User(String),
    /// sluice's own (`sluice__i_NAME`): NAME.
    Own(String),
}

/// A stored metadata name read back (names are compared without case in
/// Azure, and answers may change their case: decoded as lower case, the
/// form S3 reports).
pub(crate) fn metadata_name_in(stored: &str) -> StoredName {
    let lower = stored.to_ascii_lowercase();
    if let Some(own) = lower.strip_prefix(OWN) {
        return StoredName::Own(own.to_string());
    }
    let Some(escaped) = lower.strip_prefix(ESCAPED) else {
        return StoredName::User(lower);
    };
    let mut bytes = Vec::with_capacity(escaped.len());
    let raw = escaped.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        let hex = (raw[i] == b'_')
            .then(|| escaped.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                bytes.push(byte);
                i += 3;
            }
            None => {
                bytes.push(raw[i]);
                i += 1;
            }
        }
    }
    StoredName::User(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_round_trip_and_keep_one_length() {
        let upload = upload_bytes("0123456789abcdef0123456789abcdef").unwrap();
        let ids = [
            BlockId {
                upload,
                part_number: 1,
                staged_at_micros: 1_790_000_000_000_000,
                crcs: Some(PartCrcs {
                    crc64nvme: u64::MAX,
                    crc32c: 7,
                }),
            },
            BlockId {
                upload,
                part_number: 10_000,
                staged_at_micros: u64::MAX,
                crcs: None,
            },
        ];
        for id in ids {
            let text = id.encode();
            assert_eq!(text.len(), 52, "{id:?}");
            assert_eq!(BlockId::decode(&text), Some(id));
        }
        // Others' block ids (tusd's 4-byte indexes, junk) are not sluice's.
        for other in ["AAAAAQ==", "not base64", ""] {
            assert_eq!(BlockId::decode(other), None, "{other}");
        }
    }

    #[test]
    fn metadata_names_round_trip() {
        // (name, as stored)
        let cases = [
            ("mtime", "mtime"),
            ("file_name", "file_name"),
            ("content-kind", "sluice__u_content_2Dkind"),
            ("2fa", "sluice__u_2fa"),
            ("a__b", "sluice__u_a_5F_5Fb"),
            ("_x", "sluice__u__5Fx"),
        ];
        for (name, stored) in cases {
            assert_eq!(metadata_name_out(name), stored, "{name}");
            assert_eq!(
                metadata_name_in(stored),
                StoredName::User(name.to_string()),
                "{stored}"
            );
            // Answers may come back in another case.
            assert_eq!(
                metadata_name_in(&stored.to_ascii_uppercase()),
                StoredName::User(name.to_string()),
                "{stored} upper"
            );
        }
        assert_eq!(
            metadata_name_in(&checksum_entry(ChecksumAlgorithm::Crc32c)),
            StoredName::Own("crc32c".into())
        );
    }
}
