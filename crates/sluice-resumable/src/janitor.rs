//! The janitor: one pass removes expired resumable-upload state (the tus sweep),
//! then aborts incomplete multipart uploads older than an age, sparing those of
//! resumable uploads that are still live. `sluice serve` runs it every
//! `janitor.interval`; `sluice janitor` runs one pass from the command line.
//! Uploads a pass finishes come back in the report, for the caller's completion
//! point.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use sluice_store::StoreError;
use sluice_upload::{StaleUploadFilter, StaleUploadReport, TransferError};

use crate::sweep::{sweep, SweepReport};
use crate::Resumable;

/// What one pass did (or, in a dry run, would do).
#[derive(Debug, Clone, Default)]
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
    tus: &Resumable,
    older_than: Duration,
    dry_run: bool,
    now: SystemTime,
) -> Result<JanitorReport, JanitorError> {
    run_once_sparing(tus, older_than, dry_run, now, &BTreeSet::new()).await
}

/// [`run_once`], sparing besides the resumable uploads' the multipart uploads
/// in `also_spare` (those others carry on, such as the gateway's imports).
pub async fn run_once_sparing(
    tus: &Resumable,
    older_than: Duration,
    dry_run: bool,
    now: SystemTime,
    also_spare: &BTreeSet<String>,
) -> Result<JanitorReport, JanitorError> {
    let resumable = sweep(tus, now, dry_run)
        .await
        .map_err(JanitorError::Sweep)?;
    let mut spare = resumable.live_multipart_ids.clone();
    spare.extend(also_spare.iter().cloned());
    let filter = StaleUploadFilter {
        older_than,
        spare,
        dry_run,
    };
    let multipart = tus
        .engine()
        .abort_stale_uploads(&filter, now)
        .await
        .map_err(JanitorError::List)?;
    Ok(JanitorReport {
        resumable,
        multipart,
    })
}
