//! Who hears of the files a commit adds: told before the commit (and may
//! stop it, by failing), told how it ended after. sluice's upload events are
//! one such listener (sluice-streams' `table::announce`): a table's file is
//! an object its readers see only once a commit holds it, so it is
//! announced then. The table knows nothing of what a listener does; a file
//! carries what its listener needs ([`NewFile::announce_as`](crate::NewFile)),
//! opaque to the table.

use std::any::Any;
use std::sync::Arc;

use sluice_store::StoreError;

use crate::NewFile;

/// What a file carries for its table's listener (opaque to the table).
pub type FileTag = Arc<dyn Any + Send + Sync>;

/// How a commit ended, for the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitEnd {
    /// The log holds it: its files are in the table.
    In,
    /// It certainly did not add its files.
    Out,
    /// Nobody can tell yet (the store failed and the log could not tell).
    Unknown,
}

/// Hears of a table's commits.
#[async_trait::async_trait]
pub trait CommitListener: Send + Sync + std::fmt::Debug {
    /// Before a commit of `files` into the table at `table`: what is told
    /// how the commit ended (None: nothing to tell). An error stops the
    /// commit before anything is written.
    async fn before(
        &self,
        table: &str,
        files: &[NewFile],
    ) -> Result<Option<Box<dyn CommitSettlement>>, StoreError>;

    /// Right after a commit that ended well, before its settlement.
    fn committed(&self) {}
}

/// What a listener is told once its commit ended.
#[async_trait::async_trait]
pub trait CommitSettlement: Send {
    async fn settle(self: Box<Self>, end: CommitEnd);
}

/// A commit of `files` into the table at `table`, heard by `listener` (if
/// any): told before (its error stops the commit, as `store_error` of it),
/// then `committed` once it ended well, then how it ended: in (a new
/// version), unknown (an error that `is_unknown`: the store failed and the
/// table could not tell), or out. Every table format commits through this,
/// so that a listener hears each the same way.
pub async fn heard<E>(
    listener: Option<&Arc<dyn CommitListener>>,
    table: &str,
    files: &[NewFile],
    store_error: impl FnOnce(StoreError) -> E,
    is_unknown: impl FnOnce(&E) -> bool,
    commit: impl std::future::Future<Output = Result<crate::Committed, E>>,
) -> Result<crate::Committed, E> {
    let Some(listener) = listener else {
        return commit.await;
    };
    let settlement = listener.before(table, files).await.map_err(store_error)?;
    let committed = commit.await;
    if committed.is_ok() {
        listener.committed();
    }
    if let Some(settlement) = settlement {
        let end = match &committed {
            Ok(crate::Committed::Version(_)) => CommitEnd::In,
            Err(error) if is_unknown(error) => CommitEnd::Unknown,
            Ok(crate::Committed::Already) | Err(_) => CommitEnd::Out,
        };
        settlement.settle(end).await;
    }
    committed
}
