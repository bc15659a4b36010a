//! The headers of `multipart/form-data` parts, bounded: the form parser looks
//! for the end of a part's headers in the bytes it has, so without a bound a
//! header that never ends grows its buffer without end.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

/// Counts the body bytes the form parser takes while it looks for the end of a
/// part's headers (from [`HeaderWindow::open`] to [`HeaderWindow::close`]). When
/// it asks for more after the limit was reached, the headers are longer than the
/// limit and the body fails: the parser never buffers more than the limit and
/// one chunk in search of them.
#[derive(Debug, Clone, Default)]
pub struct HeaderWindow {
    /// Bytes taken since the window opened; `u64::MAX` while it is closed.
    taken: Arc<AtomicU64>,
}

impl HeaderWindow {
    const CLOSED: u64 = u64::MAX;

    pub fn open(&self) {
        self.taken.store(0, Ordering::SeqCst);
    }

    pub fn close(&self) {
        self.taken.store(Self::CLOSED, Ordering::SeqCst);
    }

    /// `body`, failing with `too_long(limit)` once a part's headers run past
    /// `limit` bytes.
    pub fn watch(
        &self,
        body: BoxStream<'static, io::Result<Bytes>>,
        limit: u64,
        too_long: fn(u64) -> io::Error,
    ) -> BoxStream<'static, io::Result<Bytes>> {
        let taken = self.taken.clone();
        let mut failed = false;
        body.map(move |chunk| {
            let so_far = taken.load(Ordering::SeqCst);
            if failed || (so_far != Self::CLOSED && so_far >= limit) {
                failed = true;
                return Err(too_long(limit));
            }
            if let (Ok(bytes), true) = (&chunk, so_far != Self::CLOSED) {
                taken.store(so_far + bytes.len() as u64, Ordering::SeqCst);
            }
            chunk
        })
        .boxed()
    }
}
