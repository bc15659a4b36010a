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

use sluice_delta::listener::{CommitListener, CommitSettlement};
use sluice_delta::NewFile;
use sluice_store::StoreError;
use sluice_upload::{Announcer, Engine, Intent, Making, Origin, UploadOutcome};

pub use sluice_delta::listener::CommitEnd;

/// How a stored file is announced once committed: where it came from (a
/// stream's batch, with its totals) and the object the store holds.
#[derive(Debug, Clone)]
pub struct FileOrigin {
    pub origin: Origin,
    pub outcome: UploadOutcome,
}

/// The listener of a stream's table: announces the files that carry a
/// [`FileOrigin`] through `engine`'s announcer (when it has one by then),
/// and is where the test fault after a commit fires.
#[derive(Clone)]
pub struct EngineListener {
    engine: Engine,
}

impl std::fmt::Debug for EngineListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineListener")
    }
}

impl EngineListener {
    pub fn new(engine: Engine) -> EngineListener {
        EngineListener { engine }
    }
}

#[async_trait::async_trait]
impl CommitListener for EngineListener {
    async fn before(
        &self,
        table: &str,
        files: &[NewFile],
    ) -> Result<Option<Box<dyn CommitSettlement>>, StoreError> {
        let origins: Vec<&FileOrigin> = files
            .iter()
            .filter_map(|f| f.announce_as.as_deref()?.downcast_ref::<FileOrigin>())
            .collect();
        if origins.is_empty() {
            return Ok(None);
        }
        let announcement = CommitAnnouncement::intend(&self.engine, table, &origins).await?;
        Ok(announcement.map(|a| Box::new(a) as Box<dyn CommitSettlement>))
    }

    fn committed(&self) {
        super::table_committed();
    }
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
}

#[async_trait::async_trait]
impl CommitSettlement for CommitAnnouncement {
    /// What the commit came to: its files announced when it holds them,
    /// their intents abandoned when it certainly does not, left to the
    /// reconciliation when nobody can tell.
    async fn settle(self: Box<Self>, end: CommitEnd) {
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
