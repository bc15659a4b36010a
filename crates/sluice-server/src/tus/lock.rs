//! One writer per upload at a time, across gateway instances, built on the store's
//! conditional writes alone. The lock is an object (`_sluice/tus/{id}/lock`) naming
//! its holder and when it lapses: created with If-None-Match, taken over from a
//! lapsed holder with If-Match on the ETag that was read, renewed with If-Match on
//! the holder's own ETag while its request runs, and deleted at the end. A gateway
//! that crashes holding a lock blocks the upload for at most the lock timeout.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sluice_store::{Body, ObjectStore, PutRequest, StoreError, WriteCondition};

use super::record::STATE_PREFIX;

fn lock_key(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/lock")
}

#[derive(Debug, Serialize, Deserialize)]
struct LockBody {
    holder: String,
    /// Milliseconds since the Unix epoch.
    until_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Why the lock was not had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another request holds the upload")]
    Held,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A held lock. Release it with [`UploadLock::release`]; dropped unreleased, it
/// lapses after the timeout.
pub struct UploadLock {
    store: Arc<dyn ObjectStore>,
    key: String,
    holder: String,
    etag: String,
    timeout: Duration,
}

impl UploadLock {
    /// Takes the lock of upload `id`, or fails at once with [`LockError::Held`].
    pub async fn acquire(
        store: Arc<dyn ObjectStore>,
        id: &str,
        timeout: Duration,
    ) -> Result<UploadLock, LockError> {
        let key = lock_key(id);
        let holder = uuid::Uuid::new_v4().simple().to_string();
        // Two rounds: the holder may release between our create and our read.
        for _ in 0..2 {
            match put(&store, &key, &holder, timeout, WriteCondition::IfNoneMatch).await {
                Ok(etag) => {
                    return Ok(UploadLock {
                        store,
                        key,
                        holder,
                        etag,
                        timeout,
                    })
                }
                Err(StoreError::PreconditionFailed) => {}
                Err(e) => return Err(e.into()),
            }
            let (current, etag) = match read(&store, &key).await {
                Ok(found) => found,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            let lapsed = current
                .as_ref()
                .is_none_or(|body| body.until_ms <= now_ms());
            if !lapsed {
                return Err(LockError::Held);
            }
            match put(
                &store,
                &key,
                &holder,
                timeout,
                WriteCondition::IfMatch(etag),
            )
            .await
            {
                Ok(etag) => {
                    tracing::info!(upload_id = id, "took over a lapsed upload lock");
                    return Ok(UploadLock {
                        store,
                        key,
                        holder,
                        etag,
                        timeout,
                    });
                }
                Err(StoreError::PreconditionFailed) => return Err(LockError::Held),
                Err(e) => return Err(e.into()),
            }
        }
        Err(LockError::Held)
    }

    /// Keeps the lock alive; returns only when a renewal fails (the lock was lost
    /// or the store is unreachable), so run it beside the work it protects.
    pub async fn keep_alive(&mut self) -> LockError {
        loop {
            tokio::time::sleep(self.timeout / 3).await;
            match put(
                &self.store,
                &self.key,
                &self.holder,
                self.timeout,
                WriteCondition::IfMatch(self.etag.clone()),
            )
            .await
            {
                Ok(etag) => self.etag = etag,
                Err(StoreError::PreconditionFailed) => return LockError::Held,
                Err(e) => return LockError::Store(e),
            }
        }
    }

    /// Gives the lock up.
    pub async fn release(self) {
        if let Err(error) = self.store.delete_object(&self.key).await {
            tracing::warn!(key = %self.key, error = %sluice_store::error_chain(&error), "could not release an upload lock; it lapses by itself");
        }
    }
}

async fn put(
    store: &Arc<dyn ObjectStore>,
    key: &str,
    holder: &str,
    timeout: Duration,
    condition: WriteCondition,
) -> Result<String, StoreError> {
    let body = LockBody {
        holder: holder.to_owned(),
        until_ms: now_ms() + timeout.as_millis() as u64,
    };
    let json = serde_json::to_vec(&body).expect("a lock body serialises");
    let mut request = PutRequest::new(key, Body::Bytes(json.into()));
    request.condition = Some(condition);
    store.put_object(request).await.map(|output| output.etag)
}

/// The lock's body (None when unreadable: treated as lapsed) and ETag.
async fn read(
    store: &Arc<dyn ObjectStore>,
    key: &str,
) -> Result<(Option<LockBody>, String), StoreError> {
    let (bytes, etag) = super::record::read_object(store.as_ref(), key).await?;
    Ok((serde_json::from_slice(&bytes).ok(), etag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_testkit::MemoryStore;

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::new())
    }

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[tokio::test]
    async fn one_holder_at_a_time_and_release_frees_it() {
        let store = store();
        let first = UploadLock::acquire(store.clone(), ID, Duration::from_secs(30))
            .await
            .unwrap();
        let second = UploadLock::acquire(store.clone(), ID, Duration::from_secs(30)).await;
        assert!(matches!(second, Err(LockError::Held)));
        first.release().await;
        UploadLock::acquire(store, ID, Duration::from_secs(30))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_lapsed_lock_is_taken_over_and_its_holder_learns_it() {
        let store = store();
        let mut crashed = UploadLock::acquire(store.clone(), ID, Duration::from_millis(300))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(350)).await;
        let _taker = UploadLock::acquire(store.clone(), ID, Duration::from_secs(30))
            .await
            .unwrap();
        // The old holder's next renewal fails.
        assert!(matches!(crashed.keep_alive().await, LockError::Held));
    }

    #[tokio::test]
    async fn a_renewed_lock_is_not_taken_over() {
        let store = store();
        let mut holder = UploadLock::acquire(store.clone(), ID, Duration::from_millis(300))
            .await
            .unwrap();
        let renewing = tokio::spawn(async move { holder.keep_alive().await });
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(matches!(
            UploadLock::acquire(store.clone(), ID, Duration::from_secs(1)).await,
            Err(LockError::Held)
        ));
        renewing.abort();
    }
}
