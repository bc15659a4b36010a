//! Carrying one import on: a gateway takes the record's lease, asks the origin
//! for the bytes from the end of the parts stored so far (a ranged GET with
//! `If-Range`; from the start when the origin serves no ranges), hands the body
//! to the engine, which cuts and stores parts within the memory budget, and
//! writes down each part as it lands (renewing the lease), so a gateway killed
//! mid-way costs the parts in flight and nothing more; any gateway takes the
//! import on once the lease lapsed. Origin errors and stalls are retried with
//! backoff; the last part in, the upload completes through the engine's
//! completion point (`upload.completed`, kind `import`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_resumable::record::StoredPart;
use sluice_store::{StoreError, UploadedPart};
use sluice_upload::{AppendRequest, Origin, UploadKind, UploadSource};

use super::fetch;
use super::record::{self, now_ms, ImportRecord, Phase};
use crate::AppState;

/// How long a gateway holds an import without writing to its record.
pub const LEASE: Duration = Duration::from_secs(30);

/// Attempts that end early before an import is given up.
const MOST_ATTEMPTS: u32 = 30;

/// The wait before attempt `n` (1 s doubling, at most 10 s: well inside the lease).
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << attempt.min(4).saturating_sub(1)).min(Duration::from_secs(10))
}

/// Carries import `id` on if it is running and nobody holds it.
pub async fn carry_on(state: AppState, id: String) {
    if let Err(e) = drive(&state, &id).await {
        tracing::warn!(import = id, error = %sluice_store::error_chain(&e), "an import stopped; another look will take it on");
    }
}

/// The record as this gateway holds it: written only while its ETag is ours.
struct Held {
    record: ImportRecord,
    etag: String,
    /// The last write of the record failed (the store did not answer): what
    /// this gateway knows is ahead of what is stored.
    unwritten: bool,
}

impl Held {
    /// Writes the record, renewing the lease; false when another gateway has
    /// taken it (this one must stop).
    async fn write(&mut self, state: &AppState) -> Result<bool, StoreError> {
        self.record.lease_until_ms = match self.record.phase {
            Phase::Running => now_ms() + LEASE.as_millis() as u64,
            _ => 0,
        };
        match record::replace(&state.store, &mut self.record, &self.etag).await {
            Ok(etag) => {
                self.etag = etag;
                self.unwritten = false;
                Ok(true)
            }
            Err(StoreError::PreconditionFailed) => Ok(false),
            Err(e) => {
                self.unwritten = true;
                Err(e)
            }
        }
    }

    /// Adds parts the store took: the record keeps them numbered without gaps.
    fn add_parts(&mut self, parts: &[UploadedPart]) {
        let mut all: Vec<StoredPart> = self.record.parts.clone();
        for part in parts {
            if !all.iter().any(|p| p.number == part.part_number) {
                all.push(StoredPart::from_uploaded(part));
            }
        }
        all.sort_by_key(|p| p.number);
        let contiguous = all
            .iter()
            .enumerate()
            .take_while(|(i, p)| p.number as usize == i + 1)
            .count();
        all.truncate(contiguous);
        self.record.parts = all;
    }

    /// Gives the import up: the reason recorded, then (only if this gateway
    /// still held it) its upload aborted.
    async fn fail(&mut self, state: &AppState, reason: String) -> Result<(), StoreError> {
        tracing::warn!(import = self.record.id, reason, "import failed");
        self.record.phase = Phase::Failed;
        self.record.error = Some(reason);
        let stored = std::mem::take(&mut self.record.parts);
        if !self.write(state).await? {
            // Another gateway has it: its upload is that gateway's now.
            self.record.parts = stored;
            return Ok(());
        }
        if let Err(e) = state
            .store
            .abort_multipart_upload(&self.record.key, &self.record.upload_id)
            .await
        {
            tracing::warn!(import = self.record.id, error = %e, "could not abort a failed import's upload; the janitor will");
        }
        Ok(())
    }
}

async fn drive(state: &AppState, id: &str) -> Result<(), StoreError> {
    let Some(imports) = &state.imports else {
        return Ok(());
    };
    let Some((record, etag)) = record::read(&state.store, id).await? else {
        return Ok(());
    };
    // Left here when the store stopped answering, and the record as it was
    // left: this gateway's still, lease or not.
    let mine = imports.left_here(id, &etag);
    if record.phase != Phase::Running || (record.lease_until_ms > now_ms() && !mine) {
        return Ok(());
    }
    // An import streams like an upload: it takes an admission slot for its
    // tenant and prefix, and waits (or is left for a later look) when there
    // is none.
    let party = crate::admission::Party::for_key(
        record.owner.clone().unwrap_or_else(|| "default".into()),
        &record.key,
    );
    let _slot = match state.admission.admit(&party).await {
        Ok(slot) => slot,
        Err(refusal) => {
            tracing::info!(import = id, reason = %refusal, "import not admitted now; a later look takes it");
            return Ok(());
        }
    };
    // Taken only now that it is admitted (a refusal leaves it to the next
    // look): what this gateway knew beyond the stored record.
    let record = imports.take_left(id, &etag).unwrap_or(record);
    let mut held = Held {
        record,
        etag,
        unwritten: false,
    };
    let carried = carry(state, imports, id, &mut held).await;
    // Stopped because the store would not take the record: this gateway goes
    // on with it at its next look, unless another writes the record first.
    // (Stopped after a write that landed, the lease decides, as for anyone.)
    if carried.is_err() && held.unwritten && held.record.phase == Phase::Running {
        imports
            .left_here
            .lock()
            .unwrap()
            .insert(id.to_owned(), (held.etag.clone(), held.record.clone()));
    }
    carried
}

async fn carry(
    state: &AppState,
    imports: &super::Imports,
    id: &str,
    held: &mut Held,
) -> Result<(), StoreError> {
    if !held.write(state).await? {
        return Ok(());
    }
    tracing::info!(
        import = id,
        url = held.record.url,
        stored = held.record.stored(),
        "carrying an import on"
    );
    loop {
        if !held.record.ranges {
            // The origin cannot start mid-way: every attempt is from the start.
            held.record.parts.clear();
        }
        let offset = held.record.stored();
        if offset >= held.record.size && held.record.size > 0 {
            break;
        }
        let fetched = Arc::new(AtomicU64::new(0));
        let attempt = fetch_into_parts(state, imports, held, offset, &fetched).await;
        held.record.bytes_fetched += fetched.load(Ordering::Relaxed);
        match attempt {
            Attempt::Done => break,
            Attempt::UploadGone => return gone(state, held).await,
            Attempt::Lost => return Ok(()),
            Attempt::Fatal(reason) => return held.fail(state, reason).await,
            Attempt::Again(reason) => {
                held.record.attempts += 1;
                held.record.error = Some(reason.clone());
                if held.record.attempts >= MOST_ATTEMPTS {
                    return held
                        .fail(
                            state,
                            format!("gave up after {} attempts: {reason}", held.record.attempts),
                        )
                        .await;
                }
                if !held.write(state).await? {
                    return Ok(());
                }
                tracing::info!(
                    import = id,
                    attempt = held.record.attempts,
                    reason,
                    "import attempt ended early; trying again"
                );
                tokio::time::sleep(backoff(held.record.attempts)).await;
            }
        }
    }
    complete(state, held).await
}

/// How one attempt ended.
enum Attempt {
    /// Every byte is in parts.
    Done,
    /// Another gateway took the import: stop.
    Lost,
    /// Worth trying again.
    Again(String),
    /// The import cannot succeed.
    Fatal(String),
    /// The multipart upload is no more: completed (by an attempt whose record
    /// was overwritten since) or aborted.
    UploadGone,
}

async fn fetch_into_parts(
    state: &AppState,
    imports: &super::Imports,
    held: &mut Held,
    offset: u64,
    fetched: &Arc<AtomicU64>,
) -> Attempt {
    // The lease is renewed before asking the origin, whose answer may take
    // up to half a lease: the lease never lapses while this gateway works.
    match held.write(state).await {
        Ok(true) => {}
        Ok(false) => return Attempt::Lost,
        Err(e) => return Attempt::Again(format!("could not renew the lease: {e}")),
    }
    let record = &held.record;
    let asked = fetch::get(
        &imports.guard,
        imports.resolver.as_ref(),
        &record.url,
        offset,
        false,
        record.validator.as_deref(),
    );
    let answer = match tokio::time::timeout(LEASE / 2, asked).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) if e.is_transient() => return Attempt::Again(e.to_string()),
        Ok(Err(e)) => return Attempt::Fatal(e.to_string()),
        Err(_) => {
            return Attempt::Again(format!(
                "the origin did not answer within {}s",
                (LEASE / 2).as_secs()
            ))
        }
    };
    if offset > 0 && answer.status != 206 {
        return Attempt::Fatal(
            "the source changed since the import began (its validator no longer matches)".into(),
        );
    }
    if answer.status == 206 && answer.range_start() != Some(offset) {
        return Attempt::Again(format!(
            "the origin answered another range than bytes={offset}- ({:?})",
            answer.range_start()
        ));
    }
    if answer.object_size() != Some(record.size) {
        return Attempt::Fatal(format!(
            "the source changed size since the import began ({} bytes then, {:?} now)",
            record.size,
            answer.object_size()
        ));
    }
    let remaining = record.size - offset;
    let (stored_tx, mut stored_rx) = tokio::sync::watch::channel(Vec::new());
    let request = AppendRequest {
        key: record.key.clone(),
        upload_id: record.upload_id.clone(),
        first_part: record.parts.len() as u32 + 1,
        carried: Vec::new(),
        part_size: record.part_size,
        last: true,
        remaining: Some(remaining),
        carried_memory: None,
        parts_stored: Some(stored_tx),
    };
    let source = UploadSource::Stream {
        stream: fetch::exactly(answer.body(fetched.clone()), remaining),
        length: Some(remaining),
    };
    let append = state.engine.append_parts(request, source);
    tokio::pin!(append);
    let base_fetched = held.record.bytes_fetched;
    let mut renew = tokio::time::interval(LEASE / 3);
    renew.tick().await;
    let appended = loop {
        tokio::select! {
            appended = &mut append => break appended,
            changed = stored_rx.changed() => {
                if changed.is_ok() {
                    let parts = stored_rx.borrow_and_update().clone();
                    held.add_parts(&parts);
                }
            }
            _ = renew.tick() => {}
        }
        // Written down as parts land (and at least every third of the lease).
        held.record.bytes_fetched = base_fetched + fetched.load(Ordering::Relaxed);
        match held.write(state).await {
            Ok(true) => {}
            Ok(false) => return Attempt::Lost,
            Err(e) => {
                tracing::warn!(import = held.record.id, error = %e, "could not write an import's progress")
            }
        }
        held.record.bytes_fetched = base_fetched;
    };
    held.add_parts(&appended.parts);
    match appended.error {
        None if held.record.stored() == held.record.size => Attempt::Done,
        None => Attempt::Again(format!(
            "the origin ended the body at {} of {} bytes",
            held.record.stored(),
            held.record.size
        )),
        Some(error) if matches!(error.store_error(), Some(StoreError::NoSuchUpload { .. })) => {
            Attempt::UploadGone
        }
        Some(error) => Attempt::Again(sluice_store::error_chain(&error)),
    }
}

/// The import's upload is gone. If the object is there with the import's
/// size, an earlier attempt completed it and announced it (its record was
/// overwritten since: a conditional write the store carried out late can put
/// back an older state); it is recorded as completed. Otherwise the upload was
/// aborted under the import, which cannot go on.
async fn gone(state: &AppState, held: &mut Held) -> Result<(), StoreError> {
    match state.store.head_object(&held.record.key).await {
        Ok(object) if object.size == held.record.size => {
            tracing::info!(
                import = held.record.id,
                key = held.record.key,
                "an import's upload was completed already; recorded as completed"
            );
            held.record.phase = Phase::Completed;
            held.record.error = None;
            held.record.parts.clear();
            held.write(state).await.map(|_| ())
        }
        Ok(_) | Err(StoreError::NoSuchKey { .. }) => {
            held.fail(
                state,
                "the multipart upload was aborted under the import".into(),
            )
            .await
        }
        Err(e) => Err(e),
    }
}

/// Joins the parts through the engine (the object's event), then records it.
async fn complete(state: &AppState, held: &mut Held) -> Result<(), StoreError> {
    let record = &held.record;
    let parts: Vec<UploadedPart> = record.parts.iter().map(StoredPart::to_uploaded).collect();
    let origin = Origin {
        kind: UploadKind::Import,
        tenant: record.owner.clone(),
        upload_id: Some(record.id.clone()),
        content_type: record.content_type.clone(),
        metadata: record.metadata.clone(),
        ..Origin::default()
    };
    let completed = state
        .engine
        .complete_multipart(
            &record.key,
            &record.upload_id,
            parts,
            record.size,
            Some(Arc::new(origin)),
        )
        .await;
    match completed {
        Ok(_) => {}
        // Completed by an attempt whose record write was lost: the object is
        // there (its event comes from the intent's reconciliation).
        Err(error)
            if matches!(error.store_error(), Some(StoreError::NoSuchUpload { .. }))
                && state
                    .store
                    .head_object(&record.key)
                    .await
                    .is_ok_and(|o| o.size == record.size) => {}
        Err(error) => {
            held.record.attempts += 1;
            let reason = format!(
                "completing the upload: {}",
                sluice_store::error_chain(&error)
            );
            if held.record.attempts >= MOST_ATTEMPTS {
                return held.fail(state, reason).await;
            }
            held.record.error = Some(reason.clone());
            held.write(state).await?;
            return Err(StoreError::transport(reason));
        }
    }
    held.record.phase = Phase::Completed;
    held.record.error = None;
    tracing::info!(
        import = held.record.id,
        key = held.record.key,
        size = held.record.size,
        fetched = held.record.bytes_fetched,
        "import completed"
    );
    held.write(state).await.map(|_| ())
}
