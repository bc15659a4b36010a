//! The janitor: one pass removes expired resumable-upload state (the tus sweep),
//! then aborts incomplete multipart uploads older than an age, sparing those of
//! resumable uploads that are still live. `sluice serve` runs it every
//! `janitor.interval`; `sluice janitor` runs one pass from the command line.

use std::time::{Duration, SystemTime};

use sluice_store::StoreError;
use sluice_upload::{StaleUploadFilter, StaleUploadReport, TransferError};

use crate::tus::sweep::{sweep, SweepReport};
use crate::tus::Tus;

/// What one pass did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JanitorReport {
    pub resumable: SweepReport,
    pub multipart: StaleUploadReport,
}

/// Why a pass stopped early.
#[derive(Debug, thiserror::Error)]
pub enum JanitorError {
    #[error("sweeping resumable uploads failed")]
    Sweep(#[source] StoreError),
    #[error("listing multipart uploads failed")]
    List(#[source] TransferError),
}

/// One pass. Multipart uploads initiated less than `older_than` ago are left
/// alone (an upload in flight may be that young; 0 aborts every one not spared).
pub async fn run_once(
    tus: &Tus,
    older_than: Duration,
    dry_run: bool,
    now: SystemTime,
) -> Result<JanitorReport, JanitorError> {
    let resumable = sweep(tus, now, dry_run)
        .await
        .map_err(JanitorError::Sweep)?;
    let filter = StaleUploadFilter {
        older_than,
        spare: resumable.live_multipart_ids.clone(),
        dry_run,
    };
    let multipart = tus
        .engine
        .abort_stale_uploads(&filter, now)
        .await
        .map_err(JanitorError::List)?;
    Ok(JanitorReport {
        resumable,
        multipart,
    })
}

/// Runs a pass every `interval` until the task is aborted.
pub fn spawn(tus: Tus, interval: Duration, older_than: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            match run_once(&tus, older_than, false, SystemTime::now()).await {
                Ok(report) => {
                    let r = &report.resumable;
                    let m = &report.multipart;
                    if r.expired + r.retired + r.orphans + m.aborted.len() + m.failed.len() > 0 {
                        tracing::info!(
                            expired = r.expired,
                            retired = r.retired,
                            orphans = r.orphans,
                            aborted = m.aborted.len(),
                            failed = m.failed.len(),
                            spared = m.spared,
                            "janitor pass"
                        );
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %sluice_store::error_chain(&error), "janitor pass failed; trying again next interval")
                }
            }
        }
    })
}
