//! Where a stream's stored files go next: its Delta table. A [`TableSink`]
//! commits the files of batches stored at about the same time together (one
//! commit for all that queued while the last was being written: group
//! commit), under this writer's own application transaction, so that a
//! commit retried after a lost answer is found in the log instead of being
//! added twice. A source with positions of its own (Kafka) commits through
//! the table itself, with one transaction per partition.
//!
//! An Iceberg table would be another sink with the same two entry points.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::delta::{Committed, DeltaTable, NewFile, TableError, Transaction};

type Waiting = (NewFile, oneshot::Sender<Result<Committed, TableError>>);

/// One stream's table, as its writer.
pub struct TableSink {
    table: Arc<DeltaTable>,
    /// This writer's application transaction: one per stream per process.
    app_id: String,
    /// Files stored and waiting for a commit.
    waiting: Mutex<Vec<Waiting>>,
    /// Whose turn it is to commit, and this writer's last committed version
    /// (None: unsure, after a commit that failed; the table tells).
    turn: tokio::sync::Mutex<Option<Option<i64>>>,
    /// Whether the source commits (with transactions of its own) instead.
    by_source: std::sync::atomic::AtomicBool,
}

impl TableSink {
    pub fn new(table: Arc<DeltaTable>, stream: &str) -> TableSink {
        TableSink {
            table,
            app_id: format!("sluice-{stream}-{}", uuid::Uuid::new_v4()),
            waiting: Mutex::new(Vec::new()),
            turn: tokio::sync::Mutex::new(Some(None)),
            by_source: false.into(),
        }
    }

    pub fn table(&self) -> &Arc<DeltaTable> {
        &self.table
    }

    /// Leaves commits to the source (Kafka: per-partition transactions).
    pub fn commit_by_source(&self) {
        self.by_source
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn commits_by_source(&self) -> bool {
        self.by_source.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Adds a stored file to the table; returns once a commit holds it.
    /// `schema` gives the files' columns (a Delta struct type) when the
    /// commit is made: the stream's latest, which holds every waiting file's.
    pub async fn add(
        &self,
        file: NewFile,
        schema: impl Fn() -> Value,
    ) -> Result<Committed, TableError> {
        let (tx, rx) = oneshot::channel();
        self.lock_waiting().push((file, tx));
        {
            let mut turn = self.turn.lock().await;
            // Everything that queued meanwhile goes in this commit (this
            // file too, unless the commit before took it).
            let waiting = std::mem::take(&mut *self.lock_waiting());
            if !waiting.is_empty() {
                let last = match *turn {
                    Some(last) => Ok(last),
                    None => self
                        .table
                        .snapshot()
                        .await
                        .map(|snapshot| snapshot.txns.get(&self.app_id).copied()),
                };
                let result = match last {
                    Ok(last) => self.commit(last, &waiting, &schema()).await,
                    Err(e) => Err(e),
                };
                *turn = match &result {
                    Ok((_, version)) => Some(Some(*version)),
                    // Landed or not: the table tells before the next.
                    Err(_) => None,
                };
                for (_, done) in waiting {
                    let _ = done.send(result.clone().map(|(committed, _)| committed));
                }
            }
        }
        rx.await
            .unwrap_or_else(|_| unreachable!("sent before the turn ends"))
    }

    /// Commits `waiting` as this writer's next transaction after `last`.
    async fn commit(
        &self,
        last: Option<i64>,
        waiting: &[Waiting],
        schema: &Value,
    ) -> Result<(Committed, i64), TableError> {
        let files: Vec<NewFile> = waiting.iter().map(|(f, _)| f.clone()).collect();
        let version = last.map_or(1, |v| v + 1);
        let transaction = Transaction {
            app_id: self.app_id.clone(),
            after: last,
            version,
        };
        let span = tracing::info_span!(
            "delta_commit",
            table = %self.table.layout().location,
            files = files.len()
        );
        self.table
            .commit(&files, &[transaction], schema)
            .instrument(span)
            .await
            .map(|committed| (committed, version))
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}
