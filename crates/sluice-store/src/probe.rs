//! Whether a store honours what sluice's exactly-once rests on: a
//! create-only write (`If-None-Match: *`) refused when the key exists. A
//! Delta commit, the tus lock and create-only uploads all take a key by such
//! a write; a store that carries it out as a plain PUT lets two writers both
//! "win" one key. Some S3-compatible stores do exactly that, silently.

use crate::{ObjectStore, PutRequest, StoreError, WriteCondition};

/// Writes a probe object (`{prefix}{uuid}`) twice, create-only, and removes
/// it: whether the second write was refused (the store honours
/// `If-None-Match`). An error: the store could not be asked.
pub async fn honours_create_only(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<bool, StoreError> {
    let key = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    let create = || {
        let mut put = PutRequest::new(key.clone(), b"probe".to_vec());
        put.condition = Some(WriteCondition::IfNoneMatch);
        store.put_object(put)
    };
    create().await?;
    let honoured = match create().await {
        Err(StoreError::PreconditionFailed) => true,
        Ok(_) => false,
        Err(other) => {
            let _ = store.delete_object(&key).await;
            return Err(other);
        }
    };
    if let Err(error) = store.delete_object(&key).await {
        tracing::debug!(%key, error = %crate::error_chain(&error), "a probe object stays");
    }
    Ok(honoured)
}
