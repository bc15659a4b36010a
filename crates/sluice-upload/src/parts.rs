//! The one part pipeline. Every multipart upload stores its parts through it,
//! whether the upload runs within one call (a file, a stream of known or unknown
//! length) or across requests (a resumable upload's appends): each part is a task
//! that holds its memory reservation until the store has the part, at most
//! `concurrency` run at once (each also holding a slot of the engine's limit on
//! transfers in flight, [`crate::tuning`]), and a failed part tells the reader to stop. At the
//! end the pipeline hands back the parts stored without a gap from the first, in
//! order, and the first failure: the caller completes, keeps or aborts.

use std::sync::Arc;

use sluice_store::{Body, UploadedPart};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::budget::Reservation;
use crate::error::TransferError;
use crate::progress::Tracker;
use crate::tuning::TransferSlot;
use crate::EngineInner;

type PartResult = (u32, Result<UploadedPart, TransferError>);

/// Where a pipeline reports each part stored (see `AppendRequest::parts_stored`):
/// every part the store took so far, in the order they landed.
pub type PartsStored = tokio::sync::watch::Sender<Vec<UploadedPart>>;

pub(crate) struct PartPipeline {
    inner: Arc<EngineInner>,
    key: String,
    upload_id: String,
    tracker: Tracker,
    tasks: JoinSet<PartResult>,
    stored: Vec<UploadedPart>,
    /// The first part number submitted.
    first: Option<u32>,
    /// The lowest-numbered failed part and its error.
    failed: Option<(u32, TransferError)>,
    /// The transfer slot [`PartPipeline::wait_for_slot`] took for the next part.
    slot: Option<TransferSlot>,
    /// Told of each part as it is stored (see [`PartsStored`]).
    report: Option<PartsStored>,
}

impl PartPipeline {
    pub(crate) fn new(
        inner: Arc<EngineInner>,
        key: &str,
        upload_id: &str,
        tracker: Tracker,
    ) -> PartPipeline {
        PartPipeline {
            inner,
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
            tracker,
            tasks: JoinSet::new(),
            stored: Vec::new(),
            first: None,
            failed: None,
            slot: None,
            report: None,
        }
    }

    /// Tells `stored` of every part as the store takes it.
    pub(crate) fn report_to(&mut self, stored: PartsStored) {
        self.report = Some(stored);
    }

    pub(crate) fn upload_id(&self) -> &str {
        &self.upload_id
    }

    fn collect(&mut self, joined: Result<PartResult, tokio::task::JoinError>) {
        let (number, error) = match joined {
            Ok((_, Ok(part))) => {
                self.stored.push(part);
                return;
            }
            Ok((number, Err(error))) => (number, error),
            // A part task that panicked: nothing after the first part can be trusted.
            Err(join) => (0, TransferError::PartTask(join.to_string())),
        };
        if self
            .failed
            .as_ref()
            .is_none_or(|(first, _)| number < *first)
        {
            self.failed = Some((number, error));
        }
    }

    /// Waits until fewer than `concurrency` parts are in flight and a transfer
    /// slot is free (kept for the next [`PartPipeline::submit`]); false once a
    /// part failed (read no further: `finish` says why).
    pub(crate) async fn wait_for_slot(&mut self) -> bool {
        while let Some(joined) = self.tasks.try_join_next() {
            self.collect(joined);
        }
        while self.failed.is_none() && self.tasks.len() >= self.inner.config.concurrency {
            match self.tasks.join_next().await {
                Some(joined) => self.collect(joined),
                None => break,
            }
        }
        if self.failed.is_none() && self.slot.is_none() {
            let tuner = self.inner.tuner.clone();
            let slot = tuner.slot();
            tokio::pin!(slot);
            // A part of this upload failing while we wait stops the reading.
            loop {
                tokio::select! {
                    slot = &mut slot => {
                        self.slot = Some(slot);
                        break;
                    }
                    Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                        self.collect(joined);
                        if self.failed.is_some() {
                            break;
                        }
                    }
                }
            }
        }
        self.failed.is_none()
    }

    /// A slot the caller took before reading the next part (the engine's
    /// order: a slot before memory).
    pub(crate) fn give_slot(&mut self, slot: Option<TransferSlot>) {
        if self.slot.is_none() {
            self.slot = slot;
        }
    }

    /// Counts a part the store already holds (an earlier run's, checked by the
    /// caller) as stored.
    pub(crate) fn adopt(&mut self, part: UploadedPart) {
        self.first = Some(
            self.first
                .map_or(part.part_number, |first| first.min(part.part_number)),
        );
        self.stored.push(part);
    }

    /// Starts storing part `number`; `reservation` is held until it is stored.
    pub(crate) fn submit(&mut self, number: u32, body: Body, reservation: Reservation) {
        self.first = Some(self.first.map_or(number, |first| first.min(number)));
        let inner = self.inner.clone();
        let slot = self.slot.take().unwrap_or_else(|| {
            debug_assert!(
                inner.config.tuning.is_none(),
                "a part submitted without waiting for a slot"
            );
            TransferSlot::unlimited()
        });
        let (key, upload_id, tracker, report) = (
            self.key.clone(),
            self.upload_id.clone(),
            self.tracker.clone(),
            self.report.clone(),
        );
        let span = tracing::debug_span!("part", number, size = body.len());
        self.tasks.spawn(
            async move {
                let result = inner.store_part(&key, &upload_id, number, body).await;
                drop(reservation);
                if let Ok(part) = &result {
                    slot.finish(part.size);
                    tracker.advance(part.size, true);
                    if let Some(report) = &report {
                        report.send_modify(|stored| stored.push(part.clone()));
                    }
                }
                (number, result)
            }
            .instrument(span),
        );
    }

    /// Waits for every part in flight (or, with `cancel`, stops them) and returns
    /// the parts stored without a gap, sorted by number, and the first failure.
    pub(crate) async fn finish(
        mut self,
        cancel: bool,
    ) -> (Vec<UploadedPart>, Option<TransferError>) {
        if cancel {
            self.tasks.abort_all();
        }
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Err(join) if join.is_cancelled() => {}
                joined => self.collect(joined),
            }
        }
        let mut stored = std::mem::take(&mut self.stored);
        stored.sort_by_key(|p| p.part_number);
        // Only the run of consecutive numbers from the first part counts: a part
        // that failed or was stopped leaves a gap nothing after it may cross.
        let mut parts = Vec::with_capacity(stored.len());
        let mut expected = self.first;
        for part in stored {
            if Some(part.part_number) != expected {
                break;
            }
            expected = Some(part.part_number + 1);
            parts.push(part);
        }
        (parts, self.failed.take().map(|(_, error)| error))
    }
}
