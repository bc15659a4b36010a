//! The requests that end a multipart upload (CompleteMultipartUpload and
//! AbortMultipartUpload) go out one at a time per upload in this process, and a
//! completion runs to its end whoever still waits for it.
//!
//! A store may carry out a completion in steps and stop between them when the
//! request's connection closes: MinIO, its client gone after it moved the parts
//! but before it wrote the object, keeps an upload that can never be completed
//! (every later completion answers InvalidPart) and makes no object. A caller
//! goes away for ordinary reasons (a gateway's client disconnects, a resumable
//! upload's lock is lost mid-request), so a completion never rides on its
//! caller's future: it runs in a task of its own, tracked with the engine's
//! other work that outlives its callers. The next completion or abort of the
//! same upload (a client's retry of the request that went away) waits for it
//! and then finds the upload gone and, for a completion, the object made.

use std::hash::BuildHasher;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// Locks by upload id, striped: uploads whose ids share a stripe take turns,
/// which costs only a wait between two ending requests.
#[derive(Debug)]
pub(crate) struct EndingLocks {
    stripes: Box<[Arc<Mutex<()>>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl EndingLocks {
    const STRIPES: usize = 256;

    pub(crate) fn new() -> EndingLocks {
        EndingLocks {
            stripes: (0..Self::STRIPES).map(|_| Arc::default()).collect(),
            hasher: Default::default(),
        }
    }

    /// Waits until no other ending request of `upload_id` runs here; the
    /// guard holds the turn (and may move into a task).
    pub(crate) async fn lock(&self, upload_id: &str) -> OwnedMutexGuard<()> {
        let stripe = (self.hasher.hash_one(upload_id) % Self::STRIPES as u64) as usize;
        self.stripes[stripe].clone().lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_ending_request_per_upload_at_a_time() {
        let locks = EndingLocks::new();
        let held = locks.lock("upload-a").await;
        let same = tokio::time::timeout(Duration::from_millis(50), locks.lock("upload-a")).await;
        assert!(same.is_err(), "a second lock of the same upload must wait");
        drop(held);
        let again = tokio::time::timeout(Duration::from_millis(50), locks.lock("upload-a")).await;
        assert!(
            again.is_ok(),
            "the turn is free once the first guard is gone"
        );
    }
}
