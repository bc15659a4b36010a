//! A part streamed from a file with its checksum sent as a trailer: the file is
//! read once, checksummed on the way, and the request carries `aws-chunked`
//! framing with an unsigned trailer (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
//!
//! The SDK's own trailer support signs every chunk with SHA-256 when the endpoint
//! is plain HTTP (a loopback MinIO, say), which costs more CPU than reading the
//! file twice; this encoder never hashes anything but the checksum.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aws_runtime::auth::PayloadSigningOverride;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use bytes::Bytes;
use http_body::Frame;

use crate::checksum::{Checksum, ChecksumAlgorithm, Hasher};

/// Bytes read (and framed) at a time.
const CHUNK: u64 = 256 * 1024;

fn trailer_name(algorithm: ChecksumAlgorithm) -> &'static str {
    match algorithm {
        ChecksumAlgorithm::Crc32c => "x-amz-checksum-crc32c",
        ChecksumAlgorithm::Crc64nvme => "x-amz-checksum-crc64nvme",
    }
}

/// Length on the wire of `len` bytes framed in chunks of `CHUNK` plus the trailer.
pub(super) fn encoded_len(len: u64, algorithm: ChecksumAlgorithm) -> u64 {
    let frame = |n: u64| format!("{n:x}").len() as u64 + 2 + n + 2;
    let full = len / CHUNK;
    let rest = len % CHUNK;
    let data = full * frame(CHUNK) + if rest > 0 { frame(rest) } else { 0 };
    let value_len = (algorithm.width() as u64).div_ceil(3) * 4;
    // "0\r\n" + "name:value\r\n" + "\r\n"
    data + 3 + trailer_name(algorithm).len() as u64 + 1 + value_len + 2 + 2
}

/// The checksum computed by the last (complete) pass over the body.
pub(super) type ChecksumSlot = Arc<Mutex<Option<Checksum>>>;

/// A body that re-reads `[offset, offset + len)` of `path` on every attempt.
pub(super) fn body(
    path: PathBuf,
    offset: u64,
    len: u64,
    algorithm: ChecksumAlgorithm,
    slot: ChecksumSlot,
) -> SdkBody {
    SdkBody::retryable(move || {
        let state = State {
            path: path.clone(),
            file: None,
            pos: offset,
            end: offset + len,
            hasher: Some(Hasher::new(algorithm)),
            algorithm,
            pending: VecDeque::new(),
            finished: false,
            slot: slot.clone(),
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            let frame = state.next_frame().await;
            frame.map(|f| (f, state))
        });
        SdkBody::from_body_1_x(http_body_util::StreamBody::new(stream))
    })
}

struct State {
    path: PathBuf,
    file: Option<Arc<File>>,
    pos: u64,
    end: u64,
    hasher: Option<Hasher>,
    algorithm: ChecksumAlgorithm,
    pending: VecDeque<Bytes>,
    finished: bool,
    slot: ChecksumSlot,
}

impl State {
    async fn next_frame(&mut self) -> Option<Result<Frame<Bytes>, io::Error>> {
        if let Some(bytes) = self.pending.pop_front() {
            return Some(Ok(Frame::data(bytes)));
        }
        if self.finished {
            return None;
        }
        if self.pos < self.end {
            return Some(self.read_chunk().await.map(Frame::data));
        }
        let checksum = self
            .hasher
            .take()
            .map(|h| h.finish())
            .unwrap_or(self.algorithm.empty());
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(checksum);
        self.finished = true;
        let trailer = format!(
            "0\r\n{}:{}\r\n\r\n",
            trailer_name(self.algorithm),
            checksum.to_base64()
        );
        Some(Ok(Frame::data(Bytes::from(trailer))))
    }

    /// Reads and hashes one chunk; queues the data and the closing CRLF and
    /// returns the chunk header.
    async fn read_chunk(&mut self) -> Result<Bytes, io::Error> {
        let want = CHUNK.min(self.end - self.pos) as usize;
        let (file, path, pos) = (self.file.clone(), self.path.clone(), self.pos);
        let mut hasher = self.hasher.take();
        let (file, data, hasher) = tokio::task::spawn_blocking(move || -> io::Result<_> {
            let file = match file {
                Some(f) => f,
                None => {
                    let mut f = File::open(&path)?;
                    f.seek(SeekFrom::Start(pos))?;
                    Arc::new(f)
                }
            };
            // Sequential reads of this attempt's own handle; `read_to_end` fills
            // the spare capacity without zeroing it first.
            let mut buf = Vec::with_capacity(want);
            (&*file).take(want as u64).read_to_end(&mut buf)?;
            if buf.len() < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank during the upload",
                ));
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&buf);
            }
            Ok((file, Bytes::from(buf), hasher))
        })
        .await
        .map_err(io::Error::other)??;
        self.file = Some(file);
        self.hasher = hasher;
        self.pos += want as u64;
        self.pending.push_back(data);
        self.pending.push_back(Bytes::from_static(b"\r\n"));
        Ok(Bytes::from(format!("{want:x}\r\n")))
    }
}

/// Sets the headers of an unsigned-trailer request and tells the signer so.
#[derive(Debug)]
pub(super) struct UnsignedTrailer {
    pub decoded_len: u64,
    pub algorithm: ChecksumAlgorithm,
}

impl Intercept for UnsignedTrailer {
    fn name(&self) -> &'static str {
        "UnsignedTrailer"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let headers = context.request_mut().headers_mut();
        headers.insert("content-encoding", "aws-chunked");
        headers.insert("x-amz-decoded-content-length", self.decoded_len.to_string());
        headers.insert("x-amz-trailer", trailer_name(self.algorithm));
        cfg.interceptor_state()
            .store_put(PayloadSigningOverride::StreamingUnsignedPayloadTrailer);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn framing_matches_the_announced_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(CHUNK * 2 + 77)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        for (offset, len) in [(0u64, 0u64), (0, 1), (5, CHUNK), (3, CHUNK * 2 + 74)] {
            for algorithm in [ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64nvme] {
                let slot = ChecksumSlot::default();
                let body = body(path.clone(), offset, len, algorithm, slot.clone());
                let wire = aws_smithy_types::byte_stream::ByteStream::new(body)
                    .collect()
                    .await
                    .unwrap()
                    .into_bytes();
                assert_eq!(
                    wire.len() as u64,
                    encoded_len(len, algorithm),
                    "{offset}+{len} {algorithm}"
                );
                let expected = algorithm.checksum(&data[offset as usize..(offset + len) as usize]);
                assert_eq!(*slot.lock().unwrap(), Some(expected));
                let text = String::from_utf8_lossy(&wire);
                let trailer = format!(
                    "0\r\n{}:{}\r\n\r\n",
                    trailer_name(algorithm),
                    expected.to_base64()
                );
                assert!(text.ends_with(&trailer), "{offset}+{len}");
            }
        }
    }
}
