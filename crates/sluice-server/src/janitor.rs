//! The janitor inside the gateway: a pass of `sluice_resumable::janitor` every
//! `janitor.interval` (expired resumable uploads, stale multipart uploads), with
//! the uploads a pass finishes handed to the completion point.

use std::time::{Duration, SystemTime};

use sluice_resumable::janitor::run_once;
use sluice_resumable::Resumable;

use crate::completion::{Completion, CompletionPoint, UploadKind};

/// Runs a pass every `interval` until the task is aborted.
pub fn spawn(
    resumable: Resumable,
    completion: CompletionPoint,
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
                    for written in &r.finished {
                        if let Some(outcome) = &written.finished {
                            let recovered = Completion::resumable(
                                UploadKind::TusRecovered,
                                outcome,
                                &written.record,
                            );
                            if let Err(error) = completion.complete(&recovered).await {
                                tracing::warn!(key = %recovered.key, %error, "the event of a recovered upload is lost");
                            }
                        }
                    }
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
