//! The janitor inside the gateway: a pass of `sluice_resumable::janitor` every
//! `janitor.interval` (expired resumable uploads, stale multipart uploads). An
//! upload a pass finishes is announced by the engine like any other
//! (`tus_recovered`).

use std::time::{Duration, SystemTime};

use sluice_resumable::janitor::run_once;
use sluice_resumable::Resumable;

/// Runs a pass every `interval` until the task is aborted.
pub fn spawn(
    resumable: Resumable,
    interval: Duration,
    older_than: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            match run_once(&resumable, older_than, false, SystemTime::now()).await {
                Ok(report) => {
                    let r = &report.resumable;
                    let m = &report.multipart;
                    if r.expired
                        + r.retired
                        + r.orphans
                        + r.finished.len()
                        + m.aborted.len()
                        + m.failed.len()
                        > 0
                    {
                        tracing::info!(
                            expired = r.expired,
                            retired = r.retired,
                            orphans = r.orphans,
                            finished = r.finished.len(),
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
