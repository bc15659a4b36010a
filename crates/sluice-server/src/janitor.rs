//! The janitor inside the gateway: a pass of `sluice_resumable::janitor` every
//! `janitor.interval` (expired resumable uploads, stale multipart uploads; the
//! uploads of running imports are spared). An upload a pass finishes is
//! announced by the engine like any other (`tus_recovered`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluice_resumable::janitor::run_once_sparing;
use sluice_resumable::Resumable;
use sluice_store::ObjectStore;

/// Runs a pass every `interval` until the task is aborted.
pub fn spawn(
    resumable: Resumable,
    store: Arc<dyn ObjectStore>,
    interval: Duration,
    older_than: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let imports = match crate::imports::record::running_upload_ids(&store).await {
                Ok(ids) => ids,
                Err(error) => {
                    tracing::warn!(error = %sluice_store::error_chain(&error), "janitor pass skipped: the imports could not be read");
                    continue;
                }
            };
            match run_once_sparing(&resumable, older_than, false, SystemTime::now(), &imports).await
            {
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
