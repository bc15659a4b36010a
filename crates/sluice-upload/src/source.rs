//! Where an upload's bytes come from: a file (read with positioned reads, part by
//! part, in parallel), an async reader or byte stream, or a blocking reader such
//! as standard input (read on a blocking thread straight into part buffers). The
//! length may be unknown: an object can be uploaded while it is being produced.

use std::io::{self, Read};
use std::path::PathBuf;

use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Buffer in front of a plain async reader, so that the engine can wait for its
/// first byte without taking it (reads larger than this bypass it).
const READER_BUFFER: usize = 64 * 1024;

/// The input of an upload.
pub enum UploadSource {
    /// A regular file; its length is read when the upload starts.
    File(PathBuf),
    /// Any async reader.
    Reader {
        reader: Box<dyn AsyncRead + Send + Unpin>,
        length: Option<u64>,
    },
    /// Any stream of byte chunks (a request body, a channel).
    Stream {
        stream: BoxStream<'static, io::Result<Bytes>>,
        length: Option<u64>,
    },
    /// A blocking reader (standard input, a pipe), read off the async runtime.
    Blocking {
        reader: Box<dyn Read + Send>,
        length: Option<u64>,
    },
}

impl UploadSource {
    pub fn length(&self) -> Option<u64> {
        match self {
            UploadSource::File(_) => None,
            UploadSource::Reader { length, .. }
            | UploadSource::Stream { length, .. }
            | UploadSource::Blocking { length, .. } => *length,
        }
    }
}

/// A sequential source that fills part buffers.
pub(crate) enum PartReader<'a> {
    Async(Box<dyn AsyncBufRead + Send + Unpin + 'a>),
    Blocking(Option<Box<dyn Read + Send>>),
}

impl PartReader<'_> {
    /// Appends to `buf` until it holds `want` bytes or the source ends.
    pub(crate) async fn fill(&mut self, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
        match self {
            PartReader::Async(reader) => {
                while buf.len() < want {
                    let before = buf.len();
                    let mut limited = (&mut **reader).take((want - before) as u64);
                    if limited.read_buf(buf).await? == 0 {
                        break;
                    }
                }
                Ok(())
            }
            PartReader::Blocking(slot) => {
                let mut reader = slot
                    .take()
                    .ok_or_else(|| io::Error::other("source reader lost after a failed read"))?;
                let mut owned = std::mem::take(buf);
                let (reader, owned, result) = tokio::task::spawn_blocking(move || {
                    let mut filled = owned.len();
                    owned.resize(want, 0);
                    let result = loop {
                        if filled == want {
                            break Ok(());
                        }
                        match reader.read(&mut owned[filled..]) {
                            Ok(0) => break Ok(()),
                            Ok(n) => filled += n,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => break Err(e),
                        }
                    };
                    owned.truncate(filled);
                    (reader, owned, result)
                })
                .await
                .map_err(io::Error::other)?;
                *slot = Some(reader);
                *buf = owned;
                result
            }
        }
    }

    /// Waits until the source has a byte to give or has ended (false), without
    /// taking it. A blocking reader is not waited for: it is not a remote client.
    pub(crate) async fn has_data(&mut self) -> io::Result<bool> {
        match self {
            PartReader::Async(reader) => Ok(!reader.fill_buf().await?.is_empty()),
            PartReader::Blocking(_) => Ok(true),
        }
    }

    /// True when the source has no more bytes; reads at most one byte, which is
    /// returned so the caller can keep it.
    pub(crate) async fn peek_end(&mut self) -> io::Result<Option<u8>> {
        let mut one = Vec::with_capacity(1);
        self.fill(&mut one, 1).await?;
        Ok(one.first().copied())
    }
}

/// A file opened when it is first read.
struct OpenOnRead {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl Read for OpenOnRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(std::fs::File::open(&self.path)?),
        };
        file.read(buf)
    }
}

impl UploadSource {
    /// The source as a sequential reader (a file too: uploads read files with
    /// positioned reads, but appending reads any source in order), and its length
    /// when known.
    pub(crate) fn into_part_reader(self) -> io::Result<(PartReader<'static>, Option<u64>)> {
        Ok(match self {
            // Opened by its first read, on the blocking thread that reads it.
            UploadSource::File(path) => (
                PartReader::Blocking(Some(Box::new(OpenOnRead { path, file: None }))),
                None,
            ),
            UploadSource::Reader { reader, length } => (
                PartReader::Async(Box::new(BufReader::with_capacity(READER_BUFFER, reader))),
                length,
            ),
            UploadSource::Stream { stream, length } => (
                PartReader::Async(Box::new(tokio_util::io::StreamReader::new(stream))),
                length,
            ),
            UploadSource::Blocking { reader, length } => {
                (PartReader::Blocking(Some(reader)), length)
            }
        })
    }
}
