//! The events of a table's data files. A file stored for a table is no object
//! its readers see until a commit holds it, and one no commit takes (its
//! writer fenced, its request withdrawn, its writer killed first) is a vacuum
//! orphan: so a table's files are announced at their commit, never at their
//! store, where the engine announces every other object.
//!
//! Before a commit, an intent for each of its files
//! ([`Making::TableCommit`]); once the commit holds them, their events.
//! A commit that certainly left them out (another writer's commit holds its
//! transactions, the table refuses appends, a file outside the table)
//! abandons the intents; one whose end is unknown (the store failed and the
//! log could not tell) leaves them to the announcer's reconciliation, which
//! asks the table's log whether it holds the file.

use std::sync::Arc;

use sluice_store::StoreError;
use sluice_upload::{Announcer, Engine, Intent, Making, Origin, UploadOutcome};

/// How a stored file is announced once committed: where it came from (a
/// stream's batch, with its totals) and the object the store holds.
#[derive(Debug, Clone)]
pub struct FileOrigin {
    pub origin: Origin,
    pub outcome: UploadOutcome,
}

/// How a commit ended, for its files' announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitEnd {
    /// The log holds it: its files are in the table.
    In,
    /// It certainly did not add its files.
    Out,
    /// Nobody can tell yet.
    Unknown,
}

/// The intents of one commit's files, written before it.
pub(crate) struct CommitAnnouncement {
    announcer: Arc<dyn Announcer>,
    intents: Vec<(Intent, UploadOutcome)>,
}

impl CommitAnnouncement {
    /// Writes an intent for each of `files` (the origins of a commit's files)
    /// of the table at `table`, when `engine` has an announcer; the commit may
    /// go ahead only once this returned Ok.
    pub(crate) async fn intend(
        engine: &Engine,
        table: &str,
        files: &[&FileOrigin],
    ) -> Result<Option<CommitAnnouncement>, StoreError> {
        let Some(announcer) = engine.announcer() else {
            return Ok(None);
        };
        let intents: Vec<(Intent, UploadOutcome)> = files
            .iter()
            .map(|from| {
                let making = Making::TableCommit {
                    table: table.to_owned(),
                };
                let outcome = &from.outcome;
                let intent = Intent::new(
                    &from.origin,
                    &outcome.key,
                    outcome.size,
                    outcome.checksum,
                    making,
                );
                (intent, outcome.clone())
            })
            .collect();
        if intents.is_empty() {
            return Ok(None);
        }
        futures::future::try_join_all(intents.iter().map(|(i, _)| announcer.intend(i))).await?;
        Ok(Some(CommitAnnouncement {
            announcer: announcer.clone(),
            intents,
        }))
    }

    /// What the commit came to: its files announced when it holds them,
    /// their intents abandoned when it certainly does not, left to the
    /// reconciliation when nobody can tell.
    pub(crate) async fn settle(self, end: CommitEnd) {
        let announcer = &self.announcer;
        match end {
            CommitEnd::In => {
                futures::future::join_all(self.intents.iter().map(|(i, o)| announcer.made(i, o)))
                    .await;
            }
            CommitEnd::Out => {
                futures::future::join_all(self.intents.iter().map(|(i, _)| announcer.abandoned(i)))
                    .await;
            }
            CommitEnd::Unknown => {
                tracing::info!(
                    files = self.intents.len(),
                    "whether the commit landed is unknown; the reconciliation reads the table's log"
                );
            }
        }
    }
}
