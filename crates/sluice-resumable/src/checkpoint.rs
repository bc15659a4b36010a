//! Progress recorded while one long request is still sending. tus-js-client and
//! Uppy send a whole file as one PATCH by default, and a draft client as one
//! append: without this, the record moved only when the request ended, and a
//! gateway killed midway (a crash, an OOM kill, a lost machine) left every part
//! it had stored unrecorded, so the client sent the whole file again.
//!
//! While the engine stores the request's parts, [`Checkpoints::follow`] hears
//! of each one as the store takes it and writes the record naming the parts
//! stored without a gap (the carried bytes, consumed by the first part, are
//! dropped from it then). Writes are not queued: parts landing while one is
//! written go into the next, so a request costs at most one record write per
//! part and usually fewer. A crash then costs the parts whose record write it
//! cut, never what an earlier checkpoint named: those parts are in the bucket
//! under the numbers the record gives, and the next writer carries on after them.
//! A checkpoint never names the upload's last byte: the part holding it is left
//! to the request's commit, which completes the object before any record says
//! every byte is in.
//!
//! Only bytes the request would keep on a clean break are recorded this way: a
//! chunk with an Upload-Checksum (all or nothing) and an upload checked against a
//! digest (whose running hash is recorded with the offset) are left to the
//! request's own commit.

use std::collections::BTreeMap;

use bytes::Bytes;
use sluice_store::UploadedPart;
use tokio::sync::watch;

use crate::error::ResumableError;
use crate::record::{Loaded, Phase, Receiving, StoredPart};
use crate::Resumable;

/// The checkpoints of one request that stores parts.
pub(crate) struct Checkpoints<'a> {
    resumable: &'a Resumable,
    /// The record before the request, its multipart upload started.
    before: Loaded,
    /// Its receiving state (what the first part stored consumes).
    receiving: Receiving,
    /// The number of the request's first part.
    first_part: u32,
    /// The offset of the first byte the request's parts hold (the first carried one).
    start: u64,
    /// The upload's length, when known: a checkpoint never names the last
    /// byte (a record says "all bytes in" only once the object exists).
    length: Option<u64>,
    /// The record's ETag after the last checkpoint (the one before it until then).
    etag: String,
    /// Parts of the request the record names.
    recorded: usize,
}

impl<'a> Checkpoints<'a> {
    /// Checkpoints of a request about to store parts from `first_part` on,
    /// at `start`, into the upload `before` describes (`receiving`: its
    /// state, the multipart upload already started).
    pub(crate) fn new(
        resumable: &'a Resumable,
        before: &Loaded,
        receiving: &Receiving,
        first_part: u32,
        start: u64,
        length: Option<u64>,
    ) -> Checkpoints<'a> {
        Checkpoints {
            resumable,
            length,
            etag: before.etag.clone(),
            before: before.clone(),
            receiving: receiving.clone(),
            first_part,
            start,
            recorded: 0,
        }
    }

    /// The record's ETag now: the request's own commit writes over it.
    pub(crate) fn etag(&self) -> &str {
        &self.etag
    }

    /// Records the parts `stored` reports as they land, until its sender is
    /// gone (the engine's call ended). A write that fails ends the
    /// checkpoints: the request's own commit says what it comes to. Each part
    /// is looked at once (the report only grows): parts that landed ahead of
    /// a gap wait in `ahead` until the gap is filled.
    pub(crate) async fn follow(&mut self, mut stored: watch::Receiver<Vec<UploadedPart>>) {
        let mut seen = 0;
        let mut ahead: BTreeMap<u32, UploadedPart> = BTreeMap::new();
        let mut run: Vec<StoredPart> = Vec::new();
        let mut run_bytes = 0u64;
        while stored.changed().await.is_ok() {
            {
                let landed = stored.borrow_and_update();
                for part in &landed[seen..] {
                    ahead.insert(part.part_number, part.clone());
                }
                seen = landed.len();
            }
            let next = |run: &Vec<StoredPart>| self.first_part + run.len() as u32;
            while let Some(part) = ahead.remove(&next(&run)) {
                // The part holding the last byte is left to the request's
                // commit, which completes the object before any record says so.
                let ends_at = self.start + run_bytes + part.size;
                if self.length.is_some_and(|length| ends_at >= length) {
                    ahead.insert(part.part_number, part);
                    break;
                }
                run_bytes += part.size;
                run.push(StoredPart::from_uploaded(&part));
            }
            if run.len() <= self.recorded {
                continue;
            }
            if let Err(error) = self.record(&run, run_bytes).await {
                tracing::warn!(upload_id = %self.before.record.id(), error = %sluice_store::error_chain(&error), "could not record progress midway; the request's end will");
                return;
            }
        }
    }

    /// Writes the record naming `run` (the request's parts without a gap,
    /// `bytes` in all).
    async fn record(&mut self, run: &[StoredPart], bytes: u64) -> Result<(), ResumableError> {
        let (config, clock, records) = (
            &self.resumable.config,
            &self.resumable.clock,
            &self.resumable.records,
        );
        let mut receiving = self.receiving.clone();
        // The first part holds every carried byte.
        receiving.tail = Bytes::new();
        let retired = std::mem::take(&mut receiving.segments);
        receiving.parts.extend_from_slice(run);
        let mut record = self.before.record.clone();
        record.upload.offset = self.start + bytes;
        record.upload.extend(clock.now(), config.expiry);
        record.phase = Phase::Receiving(receiving);
        let etag = match records.replace(&record, &self.etag).await {
            Ok(etag) => etag,
            // Refused by its own precondition: a retried write whose first
            // attempt landed (its answer lost) finds the record already this.
            Err(ResumableError::Conflict) => match records.load(record.id()).await? {
                found if found.record == record => found.etag,
                _ => return Err(ResumableError::Conflict),
            },
            Err(error) => return Err(error),
        };
        tracing::debug!(upload_id = %record.id(), offset = record.upload.offset, parts = run.len(), "progress recorded midway");
        if self.recorded == 0 {
            records.delete_segments(record.id(), &retired).await;
        }
        // Not remembered as this process's last write (see `Held`): the
        // request's end writes the record again on every path that keeps it,
        // and a path that does not (a completion, a restart) must not leave
        // the next request a stale one.
        self.etag = etag;
        self.recorded = run.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn part(number: u32) -> UploadedPart {
        UploadedPart {
            part_number: number,
            etag: format!("e{number}"),
            size: 16 * MIB,
            checksum: None,
        }
    }

    /// Parts as they land, in any order, against what the record then names:
    /// the run without a gap from the first part, never the part holding the
    /// upload's last byte.
    #[tokio::test(start_paused = true)]
    async fn only_the_gapless_run_short_of_the_last_byte_is_recorded() {
        // (landing order, the upload's length, parts the record names)
        let cases: [(&[u32], u64, &[u32]); 4] = [
            (&[1, 2, 3], 96 * MIB, &[1, 2, 3]),
            (&[2, 1, 4], 96 * MIB, &[1, 2]),
            (&[3, 2], 96 * MIB, &[]),
            (&[1, 2, 3, 4], 64 * MIB, &[1, 2, 3]),
        ];
        for (landing, length, named) in cases {
            let (_memory, resumable, loaded) = crate::chunk::tests::fresh_of(length).await;
            let receiving = Receiving {
                multipart_id: Some("m".into()),
                ..Receiving::default()
            };
            let mut checkpoints =
                Checkpoints::new(&resumable, &loaded, &receiving, 1, 0, Some(length));
            let (report, landed) = watch::channel(Vec::new());
            let feeding = async move {
                for &number in landing {
                    report.send_modify(|parts| parts.push(part(number)));
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            };
            tokio::join!(checkpoints.follow(landed), feeding);
            let status = resumable.status(loaded.record.id()).await.unwrap();
            let recorded: Vec<u32> = match &status.phase {
                Phase::Receiving(receiving) => receiving.parts.iter().map(|p| p.number).collect(),
                _ => Vec::new(),
            };
            assert_eq!(recorded, named, "{landing:?} of {length}");
            assert_eq!(
                status.upload.offset,
                named.len() as u64 * 16 * MIB,
                "{landing:?}"
            );
        }
    }
}
