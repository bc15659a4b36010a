//! Removing expired resumable uploads: an unfinished upload idle past its expiry
//! loses its multipart upload and state; a finished one keeps its object and loses
//! its state (HEAD then answers 404). State objects without a record (a deletion
//! cut short) are removed too. Uploads whose lock is held are left for next time.
//! An upload whose bytes are all in but whose object is missing (a record from
//! before phases existed) is finished, never kept forever. The sweep also reports
//! the multipart uploads of the uploads that stay, so the janitor spares them.

use std::collections::BTreeSet;
use std::time::SystemTime;

use sluice_store::StoreError;

use crate::lock::{LockError, UploadLock};
use crate::record::{valid_id, Phase, STATE_PREFIX};
use crate::{Resumable, ResumableError, Written};

/// What one sweep did.
#[derive(Debug, Default, Clone)]
pub struct SweepReport {
    /// Uploads looked at.
    pub seen: usize,
    /// Unfinished uploads removed (multipart upload aborted).
    pub expired: usize,
    /// Finished uploads whose state was removed.
    pub retired: usize,
    /// State left without a record, removed.
    pub orphans: usize,
    /// Uploads whose bytes were all in, finished now (each is a completion).
    pub finished: Vec<Written>,
    /// Multipart upload ids of the uploads that remain (unexpired, or locked).
    pub live_multipart_ids: BTreeSet<String>,
}

/// One pass over every upload's state; with `dry_run`, counts what it would
/// remove and removes nothing.
pub async fn sweep(
    resumable: &Resumable,
    now: SystemTime,
    dry_run: bool,
) -> Result<SweepReport, StoreError> {
    let tus = resumable;
    let mut ids = BTreeSet::new();
    let mut with_record = BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = tus
            .store
            .list_objects(STATE_PREFIX, cursor.as_deref(), 1000)
            .await?;
        for object in &page.objects {
            let rest = &object.key[STATE_PREFIX.len()..];
            if let Some((id, name)) = rest.split_once('/') {
                if valid_id(id) {
                    ids.insert(id.to_owned());
                    if name == "state" {
                        with_record.insert(id.to_owned());
                    }
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut report = SweepReport {
        seen: ids.len(),
        ..SweepReport::default()
    };
    for id in ids {
        if !with_record.contains(&id) {
            if !dry_run {
                tus.records.delete_all(&id).await?;
            }
            report.orphans += 1;
            continue;
        }
        let mut loaded = match tus.records.load(&id).await {
            Ok(loaded) => loaded,
            Err(e) if e.is_not_found() => continue,
            Err(ResumableError::Store(e)) => return Err(e),
            Err(error) => {
                tracing::warn!(upload_id = %id, %error, "unreadable upload record left in place");
                continue;
            }
        };
        let stuck = matches!(loaded.record.phase, Phase::Receiving(_) | Phase::Created)
            && loaded.record.upload.is_complete();
        if stuck && !dry_run {
            match tus.finish_stuck(&id).await {
                Ok(written) => {
                    tracing::info!(upload_id = %id, key = %written.record.key, "finished an upload whose bytes were all in");
                    loaded.record = written.record.clone();
                    report.finished.push(written);
                }
                Err(error) => {
                    tracing::warn!(upload_id = %id, error = %sluice_store::error_chain(&error), "could not finish an upload whose bytes are all in; it expires as usual");
                }
            }
        }
        if !is_due(&loaded.record, now) {
            spare(&mut report, &loaded.record);
            continue;
        }
        if dry_run {
            if loaded.record.is_finished() {
                report.retired += 1;
            } else {
                report.expired += 1;
            }
            continue;
        }
        let lock = match UploadLock::acquire(
            tus.store.clone(),
            tus.lock_hints.clone(),
            &id,
            tus.config.lock_lease,
            tus.clock.clone(),
        )
        .await
        {
            Ok(lock) => lock,
            Err(LockError::Held { .. }) => {
                spare(&mut report, &loaded.record);
                continue;
            }
            Err(LockError::Store(e)) => return Err(e),
        };
        // Read again under the lock: a request may have extended or finished it.
        let record = match tus.records.load(&id).await {
            Ok(loaded) => loaded.record,
            Err(e) => {
                lock.release().await;
                match e {
                    ResumableError::Store(e) => return Err(e),
                    _ => continue,
                }
            }
        };
        if !is_due(&record, now) {
            lock.release().await;
            spare(&mut report, &record);
            continue;
        }
        let finished = record.is_finished();
        if let (Some(upload_id), false) = (record.multipart_id(), finished) {
            if let Err(error) = tus.engine.abort_multipart(&record.key, upload_id).await {
                tracing::warn!(upload_id = %id, error = %sluice_store::error_chain(&error), "could not abort an expired upload's multipart upload");
                lock.release().await;
                spare(&mut report, &record);
                continue;
            }
        }
        // Deletes the lock too, last.
        tus.records.delete_all(&id).await?;
        lock.release().await;
        if finished {
            report.retired += 1;
        } else {
            report.expired += 1;
            tracing::info!(upload_id = %id, key = %record.key, "expired upload removed");
        }
    }
    Ok(report)
}

/// Whether an upload is past its expiry: unfinished and idle, or finished (or
/// invalid) and its state kept long enough.
fn is_due(record: &crate::UploadRecord, now: SystemTime) -> bool {
    let upload = &record.upload;
    // A finished upload's state, and an invalid upload's record, are kept
    // until their time, whatever their offset says.
    if record.is_finished() || record.is_invalid() {
        now >= std::time::UNIX_EPOCH + std::time::Duration::from_secs(upload.expires)
    } else {
        upload.is_expired(now)
    }
}

/// Keeps an upload that stays: its multipart upload is spared by the janitor.
fn spare(report: &mut SweepReport, record: &crate::UploadRecord) {
    if let Some(upload_id) = record.multipart_id() {
        report.live_multipart_ids.insert(upload_id.to_owned());
    }
}
