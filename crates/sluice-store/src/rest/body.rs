//! A write's [`Body`] on its way to a REST store: its CRCs, taken before it
//! is sent (Azure's block ids carry them and the service verifies the one it
//! knows; GCS stores the CRC-32C it was told, once verified), off the async
//! threads for anything but small bodies; and the body as a request body,
//! files streamed with positioned reads.

use std::os::unix::fs::FileExt;

use bytes::Bytes;
use futures::StreamExt;

use crate::checksum::{Checksum, ChecksumAlgorithm, Hasher};
use crate::error::StoreError;
use crate::types::Body;

/// Bodies up to this size are hashed in place; larger ones on the blocking pool.
const INLINE_HASH: u64 = 256 * 1024;
/// Read size when hashing or streaming a file.
const FILE_BUFFER: usize = 256 * 1024;

/// A body's two CRCs: the one S3 defaults to and the one GCS keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartCrcs {
    pub crc64nvme: u64,
    pub crc32c: u32,
}

impl PartCrcs {
    /// The checksum of `algorithm` among `crcs`.
    pub fn of(algorithm: ChecksumAlgorithm, crcs: Option<PartCrcs>) -> Option<Checksum> {
        let crcs = crcs?;
        Some(Checksum {
            algorithm,
            value: match algorithm {
                ChecksumAlgorithm::Crc64nvme => crcs.crc64nvme,
                ChecksumAlgorithm::Crc32c => u64::from(crcs.crc32c),
            },
        })
    }
}

/// Both CRCs of a body.
pub(crate) async fn crcs_of(body: &Body) -> Result<PartCrcs, StoreError> {
    if body.len() <= INLINE_HASH && !matches!(body, Body::File { .. }) {
        return hash(body);
    }
    let body = body.clone();
    tokio::task::spawn_blocking(move || hash(&body))
        .await
        .map_err(|e| StoreError::Body(std::io::Error::other(e.to_string())))?
}

fn hash(body: &Body) -> Result<PartCrcs, StoreError> {
    let mut crc64 = Hasher::new(ChecksumAlgorithm::Crc64nvme);
    let mut crc32c = Hasher::new(ChecksumAlgorithm::Crc32c);
    let mut update = |data: &[u8]| {
        crc64.update(data);
        crc32c.update(data);
    };
    match body {
        Body::Bytes(bytes) => update(bytes),
        Body::Chunks(chunks) => chunks.iter().for_each(|c| update(c)),
        Body::File { path, offset, len } => {
            let file = std::fs::File::open(path).map_err(StoreError::Body)?;
            let mut buffer = vec![0u8; FILE_BUFFER];
            let mut done = 0u64;
            while done < *len {
                let want = (*len - done).min(FILE_BUFFER as u64) as usize;
                let read = file
                    .read_at(&mut buffer[..want], offset + done)
                    .map_err(StoreError::Body)?;
                if read == 0 {
                    return Err(StoreError::LengthMismatch {
                        expected: *len,
                        actual: done,
                    });
                }
                update(&buffer[..read]);
                done += read as u64;
            }
        }
    }
    Ok(PartCrcs {
        crc64nvme: crc64.finish().value,
        crc32c: crc32c.finish().value as u32,
    })
}

/// A put's CRCs and the object's checksum in sluice's terms (the one the
/// caller declared, else CRC-64/NVME), once the declared one is checked.
pub(crate) async fn put_checksums(
    request: &crate::types::PutRequest,
) -> Result<(PartCrcs, Option<Checksum>), StoreError> {
    let crcs = crcs_of(&request.body).await?;
    check_declared(crcs, request.checksum)?;
    let algorithm = request
        .checksum
        .map_or(ChecksumAlgorithm::Crc64nvme, |c| c.algorithm);
    Ok((crcs, PartCrcs::of(algorithm, Some(crcs))))
}

/// Refuses a body whose bytes do not have the checksum the caller declared
/// (nothing is sent then).
pub(crate) fn check_declared(crcs: PartCrcs, declared: Option<Checksum>) -> Result<(), StoreError> {
    match declared {
        Some(want) if PartCrcs::of(want.algorithm, Some(crcs)) != Some(want) => {
            Err(StoreError::ChecksumMismatch {
                algorithm: want.algorithm.name(),
            })
        }
        _ => Ok(()),
    }
}

/// A request body as the client sends it: chunks, so that each one taken
/// counts as progress (see [`super::watch`]).
pub(crate) type Outgoing = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Bytes in memory as a request body, in pieces of at most [`FILE_BUFFER`].
pub(crate) fn in_memory(bytes: Bytes) -> Outgoing {
    let pieces: Vec<Result<Bytes, std::io::Error>> = (0..bytes.len())
        .step_by(FILE_BUFFER)
        .map(|at| Ok(bytes.slice(at..(at + FILE_BUFFER).min(bytes.len()))))
        .collect();
    futures::stream::iter(pieces).boxed()
}

/// The body as a request body, and its length.
pub(crate) fn outgoing(body: &Body) -> (Outgoing, u64) {
    let len = body.len();
    let sent = match body {
        Body::Bytes(bytes) => in_memory(bytes.clone()),
        Body::Chunks(chunks) => {
            let pieces: Vec<Outgoing> = chunks.iter().cloned().map(in_memory).collect();
            futures::stream::iter(pieces).flatten().boxed()
        }
        Body::File { path, offset, len } => file_stream(path.clone(), *offset, *len).boxed(),
    };
    (sent, len)
}

/// `len` bytes of a file from `offset`, read on the blocking pool.
fn file_stream(
    path: std::path::PathBuf,
    offset: u64,
    len: u64,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let state = (None::<std::sync::Arc<std::fs::File>>, 0u64);
    futures::stream::unfold(state, move |(file, done)| {
        let path = path.clone();
        async move {
            if done >= len {
                return None;
            }
            let file = match file {
                Some(file) => file,
                None => match std::fs::File::open(&path) {
                    Ok(file) => std::sync::Arc::new(file),
                    Err(e) => return Some((Err(e), (None, len))),
                },
            };
            let want = (len - done).min(FILE_BUFFER as u64) as usize;
            let reader = file.clone();
            let read = tokio::task::spawn_blocking(move || {
                let mut buffer = vec![0u8; want];
                let read = reader.read_at(&mut buffer, offset + done)?;
                buffer.truncate(read);
                Ok::<_, std::io::Error>(buffer)
            })
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
            match read {
                Ok(buffer) if buffer.is_empty() => Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file is shorter than the body",
                    )),
                    (None, len),
                )),
                Ok(buffer) => {
                    let read = buffer.len() as u64;
                    Some((Ok(Bytes::from(buffer)), (Some(file), done + read)))
                }
                Err(e) => Some((Err(e), (None, len))),
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_body_form_has_the_same_crcs() {
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut padded = vec![7u8; 10];
        padded.extend_from_slice(&data);
        std::fs::write(&path, &padded).unwrap();
        let want = PartCrcs {
            crc64nvme: ChecksumAlgorithm::Crc64nvme.checksum(&data).value,
            crc32c: ChecksumAlgorithm::Crc32c.checksum(&data).value as u32,
        };
        let bodies = [
            Body::Bytes(Bytes::from(data.clone())),
            Body::Chunks(
                vec![
                    Bytes::from(data[..1000].to_vec()),
                    Bytes::from(data[1000..].to_vec()),
                ]
                .into(),
            ),
            Body::File {
                path: path.clone(),
                offset: 10,
                len: data.len() as u64,
            },
        ];
        for body in bodies {
            assert_eq!(crcs_of(&body).await.unwrap(), want, "{body:?}");
        }
        let sent: Vec<Bytes> = file_stream(path, 10, data.len() as u64)
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(sent.concat(), data);
    }

    #[test]
    fn a_declared_checksum_must_match() {
        let crcs = PartCrcs {
            crc64nvme: ChecksumAlgorithm::Crc64nvme.checksum(b"abc").value,
            crc32c: ChecksumAlgorithm::Crc32c.checksum(b"abc").value as u32,
        };
        assert!(check_declared(crcs, None).is_ok());
        assert!(check_declared(crcs, Some(ChecksumAlgorithm::Crc32c.checksum(b"abc"))).is_ok());
        assert!(check_declared(crcs, Some(ChecksumAlgorithm::Crc64nvme.checksum(b"abd"))).is_err());
    }
}
