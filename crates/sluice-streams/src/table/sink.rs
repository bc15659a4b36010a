//! Where a stream's stored files go next: its table (Delta or Iceberg, see
//! [`StreamTable`]). A [`TableSink`]
//! commits the files of batches stored at about the same time together (one
//! commit for all that are ready when the last commit is done: group commit),
//! under this writer's own application transaction, so that a commit retried
//! after a lost answer is found in the log instead of being added twice. A
//! source with positions of its own (Kafka) commits through the table itself,
//! with one transaction per partition.
//!
//! Requests with an idempotency key ([`TableSink::begin`]) are committed whole
//! and once: the files holding a keyed request's records join the table in
//! one commit, with the request's own transaction
//! (`sluice/key/<stream>/<key>`), once every batch it touched is stored —
//! and every other keyed request sharing those files is whole too (batches are
//! shared: group commit). A retry of a request the table holds is answered
//! without appending. A keyed request whose batch failed withdraws the files
//! it shares (their requests fail and are retried; nothing of them is in).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tracing::Instrument;

use super::delta::mapping::ColumnMapping;
use super::schema::Version;
use super::stream_table::{CommitError, StreamTable};
use sluice_table::{Committed, NewFile, Transaction};

/// A stored file waiting for its commit.
struct Waiting {
    file: NewFile,
    batch: u64,
    /// The stream's columns when it was stored (None: no schema).
    columns: Option<Arc<Version>>,
    done: oneshot::Sender<Result<Committed, CommitError>>,
}

/// A keyed request in flight.
#[derive(Default)]
struct Request {
    /// The batches it touched.
    batches: HashSet<u64>,
    /// Its records are all appended (no more batches).
    appended: bool,
    /// One of its batches failed: the files it shares are withdrawn.
    failed: bool,
    /// Its batches whose files are settled: committed, withdrawn or failed.
    settled: HashSet<u64>,
    /// Its append began (a pool job that runs even when the handler is gone).
    started: bool,
    /// Its handler is done with it (answered, or gone with its client): it
    /// goes once its batches are settled, so that a request whose client left
    /// is still committed whole, with its key.
    ended: bool,
}

impl Request {
    /// Its handler is done with it and nothing of it is pending: no append
    /// began (none will: see [`TableSink::append_started`]), or it ended and
    /// every batch it touched is settled.
    fn done(&self) -> bool {
        self.ended
            && (!self.started
                || (self.appended && self.batches.iter().all(|b| self.settled.contains(b))))
    }
}

#[derive(Default)]
struct Gate {
    waiting: Vec<Waiting>,
    requests: HashMap<String, Request>,
    /// Batch → the keyed requests with records in it.
    touched_by: HashMap<u64, Vec<String>>,
    /// Batches committed of requests still in flight.
    committed: HashSet<u64>,
    /// Batches that failed (recent ones): a keyed request's records that
    /// reach one after it failed fail the request too.
    failed: HashSet<u64>,
}

/// Why a request with an idempotency key cannot start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyedRequest {
    /// The table holds it: it was committed before (answer, do not append).
    Committed,
    /// A request with this key is in flight here.
    InFlight,
}

/// One stream's table, as its writer.
pub struct TableSink {
    table: StreamTable,
    stream: String,
    /// This writer's application transaction: one per stream per process.
    app_id: String,
    gate: Mutex<Gate>,
    /// Whose turn it is to commit, and this writer's last committed version
    /// (None: unsure, after a commit that failed; the table tells).
    turn: tokio::sync::Mutex<Option<Option<i64>>>,
    /// Whether the source commits (with transactions of its own) instead.
    by_source: std::sync::atomic::AtomicBool,
    /// The table's column mapping, as read when the stream opened.
    column_mapping: Option<ColumnMapping>,
}

impl TableSink {
    pub fn new(table: StreamTable, stream: &str) -> TableSink {
        TableSink {
            table,
            stream: stream.to_string(),
            app_id: format!("sluice-{stream}-{}", uuid::Uuid::new_v4()),
            gate: Mutex::new(Gate::default()),
            turn: tokio::sync::Mutex::new(Some(None)),
            by_source: false.into(),
            column_mapping: None,
        }
    }

    /// The same sink, storing its files under `mapping`'s physical names.
    pub fn with_column_mapping(mut self, mapping: Option<ColumnMapping>) -> TableSink {
        self.column_mapping = mapping;
        self
    }

    pub fn table(&self) -> &StreamTable {
        &self.table
    }

    /// The table's column mapping (files store physical names), if it maps.
    pub fn column_mapping(&self) -> Option<&ColumnMapping> {
        self.column_mapping.as_ref()
    }

    /// Leaves commits to the source (Kafka: per-partition transactions).
    pub fn commit_by_source(&self) {
        self.by_source
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn commits_by_source(&self) -> bool {
        self.by_source.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The application transaction of a keyed request.
    fn request_app_id(&self, key: &str) -> String {
        sluice_table::key_txn(&self.stream, key)
    }

    /// Starts a request with idempotency key `key`, unless the table holds
    /// it already or one is in flight here (see [`KeyedRequest`]). Once
    /// started, whatever happens next, end it with [`TableSink::end`].
    pub async fn start_keyed(&self, key: &str) -> Result<Option<KeyedRequest>, CommitError> {
        if self.lock().requests.contains_key(key) {
            return Ok(Some(KeyedRequest::InFlight));
        }
        if self
            .table
            .txn_version(&self.request_app_id(key))
            .await?
            .is_some()
        {
            return Ok(Some(KeyedRequest::Committed));
        }
        let mut gate = self.lock();
        if gate.requests.contains_key(key) {
            return Ok(Some(KeyedRequest::InFlight));
        }
        gate.requests.insert(key.to_string(), Request::default());
        Ok(None)
    }

    /// The append of keyed request `key` begins; false when its handler
    /// ended it first (nothing may be appended: its key would not be kept).
    pub(crate) fn append_started(&self, key: &str) -> bool {
        match self.lock().requests.get_mut(key) {
            Some(request) => {
                request.started = true;
                true
            }
            None => false,
        }
    }

    /// Records of keyed request `key` went into `batch` (called while they
    /// are appended, before the batch can be stored).
    pub(crate) fn touched(&self, key: &str, batch: u64) {
        let mut gate = self.lock();
        let failed = gate.failed.contains(&batch);
        if let Some(request) = gate.requests.get_mut(key) {
            if request.batches.insert(batch) {
                if failed {
                    request.failed = true;
                    request.settled.insert(batch);
                }
                gate.touched_by
                    .entry(batch)
                    .or_default()
                    .push(key.to_string());
            }
        }
    }

    /// Every record of `key` is appended: its batches are known (for a
    /// request appended in parts, such as `sluice ingest`'s input).
    pub fn appended(self: &Arc<Self>, key: &str) {
        if let Some(request) = self.lock().requests.get_mut(key) {
            request.appended = true;
        }
        self.commit_soon();
    }

    /// `batch` was not stored: the keyed requests in it fail, and withdraw
    /// the files they share.
    pub(crate) fn failed(self: &Arc<Self>, batch: u64) {
        {
            let mut gate = self.lock();
            if gate.failed.len() >= 10_000 {
                gate.failed.clear();
            }
            gate.failed.insert(batch);
            gate.settle(&[batch], true);
        }
        self.commit_soon();
    }

    /// Gives a keyed request up (its input failed part-way): the files
    /// holding its records are withdrawn, none of them joins the table.
    pub fn abandon(self: &Arc<Self>, key: &str) {
        if let Some(request) = self.lock().requests.get_mut(key) {
            // Its files are withdrawn as they come to be committed.
            request.failed = true;
            request.appended = true;
        }
        self.commit_soon();
    }

    /// The keyed request's handler is done with it (see [`Request::ended`]).
    pub fn end(self: &Arc<Self>, key: &str) {
        let mut gate = self.lock();
        if let Some(request) = gate.requests.get_mut(key) {
            request.ended = true;
        }
        gate.forget_done();
        drop(gate);
        // Files it held back may be ready now.
        self.commit_soon();
    }

    /// Adds the stored file of `batch` to the table; returns once a commit
    /// holds it. `columns` are the stream's when it was stored.
    pub async fn add(
        self: &Arc<Self>,
        file: NewFile,
        batch: u64,
        columns: Option<Arc<Version>>,
    ) -> Result<Committed, CommitError> {
        let (done, committed) = oneshot::channel();
        {
            let mut gate = self.lock();
            gate.waiting.push(Waiting {
                file,
                batch,
                columns,
                done,
            });
        }
        self.commit_ready().await;
        match committed.await {
            Ok(result) => result,
            // Only a sink dropped mid-commit: the file is not known to be in.
            Err(_) => Err(CommitError::Withdrawn {
                reason: "the stream closed before its commit".into(),
            }),
        }
    }

    fn commit_soon(self: &Arc<Self>) {
        let sink = self.clone();
        tokio::spawn(async move { sink.commit_ready().await });
    }

    /// Commits every waiting file that is ready (one turn at a time).
    async fn commit_ready(&self) {
        let mut turn = self.turn.lock().await;
        let (ready, withdrawn, requests) = self.sort_waiting();
        let batches: Vec<u64> = withdrawn.iter().map(|w| w.batch).collect();
        self.lock().settle(&batches, true);
        for waiting in withdrawn {
            let _ = waiting.done.send(Err(CommitError::Withdrawn {
                reason: "it holds records of a request whose other records were not stored".into(),
            }));
        }
        if ready.is_empty() {
            return;
        }
        let last = match *turn {
            Some(last) => Ok(last),
            None => self.table.txn_version(&self.app_id).await,
        };
        let result = match last {
            Ok(last) => self.commit(last, &ready, &requests).await,
            Err(e) => Err(e),
        };
        if let Ok((Committed::Version(version), _)) = &result {
            self.table.after_commit(*version);
        }
        if let Ok((Committed::Already, _)) = &result {
            // This writer's transaction was found at the version it meant to
            // write: a commit it took for failed landed late. These files
            // are not in: they wait for the next turn, which reads the
            // table's version first.
            *turn = None;
            self.lock().waiting.extend(ready);
            drop(turn);
            Box::pin(self.commit_ready()).await;
            return;
        }
        *turn = match &result {
            Ok((_, version)) => Some(Some(*version)),
            // Landed or not: the table tells before the next.
            Err(_) => None,
        };
        {
            let mut gate = self.lock();
            let batches: Vec<u64> = ready.iter().map(|w| w.batch).collect();
            if result.is_ok() {
                for batch in &batches {
                    if gate.touched_by.contains_key(batch) {
                        gate.committed.insert(*batch);
                    }
                }
            }
            // A commit that failed fails its keyed requests: what else of
            // them waits is withdrawn.
            gate.settle(&batches, result.is_err());
        }
        for waiting in ready {
            let _ = waiting
                .done
                .send(result.clone().map(|(committed, _)| committed));
        }
    }

    /// Sorts the waiting files: those that may be committed now (every keyed
    /// request in them whole: appended, each of its batches stored, and
    /// those files committable too), those withdrawn (a keyed request in
    /// them failed), and the keyed requests the ready ones complete.
    fn sort_waiting(&self) -> (Vec<Waiting>, Vec<Waiting>, Vec<String>) {
        let mut gate = self.lock();
        let failed = |gate: &Gate, batch: u64| {
            gate.touched_by.get(&batch).is_some_and(|keys| {
                keys.iter()
                    .any(|k| gate.requests.get(k).is_some_and(|r| r.failed))
            })
        };
        let waiting = std::mem::take(&mut gate.waiting);
        let (withdrawn, waiting): (Vec<Waiting>, Vec<Waiting>) =
            waiting.into_iter().partition(|w| failed(&gate, w.batch));
        // Candidates, narrowed until every keyed request they hold is whole
        // among them (or committed before).
        let mut ready: HashSet<u64> = waiting.iter().map(|w| w.batch).collect();
        loop {
            let whole = |batch: &u64| {
                gate.touched_by.get(batch).is_none_or(|keys| {
                    keys.iter().all(|key| {
                        gate.requests.get(key).is_some_and(|r| {
                            r.appended
                                && r.batches
                                    .iter()
                                    .all(|b| gate.committed.contains(b) || ready.contains(b))
                        })
                    })
                })
            };
            let out: Vec<u64> = ready.iter().filter(|b| !whole(b)).copied().collect();
            if out.is_empty() {
                break;
            }
            for batch in out {
                ready.remove(&batch);
            }
        }
        let mut requests: Vec<String> = ready
            .iter()
            .filter_map(|batch| gate.touched_by.get(batch))
            .flatten()
            .cloned()
            .collect();
        requests.sort();
        requests.dedup();
        let (now, later): (Vec<Waiting>, Vec<Waiting>) =
            waiting.into_iter().partition(|w| ready.contains(&w.batch));
        gate.waiting = later;
        (now, withdrawn, requests)
    }

    /// Commits `ready` as this writer's next transaction after `last`, with
    /// the transactions of the keyed `requests` they complete.
    async fn commit(
        &self,
        last: Option<i64>,
        ready: &[Waiting],
        requests: &[String],
    ) -> Result<(Committed, i64), CommitError> {
        let files: Vec<NewFile> = ready.iter().map(|w| w.file.clone()).collect();
        // A stream's schema only grows: the newest holds every file's.
        let columns = ready
            .iter()
            .filter_map(|w| w.columns.as_ref())
            .max_by_key(|version| version.number);
        let version = last.map_or(1, |v| v + 1);
        let mut transactions = vec![Transaction {
            app_id: self.app_id.clone(),
            after: last,
            version,
        }];
        transactions.extend(requests.iter().map(|key| Transaction {
            app_id: self.request_app_id(key),
            after: None,
            version: 1,
        }));
        let span = tracing::info_span!(
            "table_commit",
            format = self.table.format(),
            table = %self.table.layout().location,
            files = files.len(),
            requests = requests.len()
        );
        self.table
            .commit(&files, &transactions, columns.map(|v| &**v))
            .instrument(span)
            .await
            .map(|committed| (committed, version))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Gate {
    /// `batches` are settled (and, when `failed`, their keyed requests fail).
    fn settle(&mut self, batches: &[u64], failed: bool) {
        for batch in batches {
            for key in self.touched_by.get(batch).cloned().unwrap_or_default() {
                if let Some(request) = self.requests.get_mut(&key) {
                    request.settled.insert(*batch);
                    request.failed |= failed;
                }
            }
        }
        self.forget_done();
    }

    /// Forgets the requests whose handlers are done and whose batches are
    /// settled, and the batches no request in flight holds.
    fn forget_done(&mut self) {
        let done: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, r)| r.done())
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            let request = self.requests.remove(&key).expect("listed");
            for batch in request.batches {
                if let Some(keys) = self.touched_by.get_mut(&batch) {
                    keys.retain(|k| *k != key);
                    if keys.is_empty() {
                        self.touched_by.remove(&batch);
                        self.committed.remove(&batch);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice_testkit::MemoryStore;

    use super::*;
    use crate::table::delta::{DeltaTable, TableLayout};
    use crate::table::schema::{Shape, StreamSchema};

    fn sink() -> Arc<TableSink> {
        let layout = TableLayout {
            location: "events".into(),
            partition_columns: Vec::new(),
        };
        let table = Arc::new(DeltaTable::new(Arc::new(MemoryStore::new()), layout));
        Arc::new(TableSink::new(StreamTable::Delta(table), "events"))
    }

    fn file(batch: u64) -> NewFile {
        NewFile {
            key: format!("events/{batch}.parquet"),
            size: 100,
            records: 10,
            announce_as: None,
            footer: None,
        }
    }

    fn columns() -> Option<Arc<Version>> {
        Some(StreamSchema::new(vec![("n".into(), Shape::Int)]).current())
    }

    /// Adds a file, failing the test rather than waiting forever.
    async fn add(sink: &Arc<TableSink>, batch: u64) -> Result<Committed, CommitError> {
        tokio::time::timeout(
            Duration::from_secs(10),
            sink.add(file(batch), batch, columns()),
        )
        .await
        .expect("the commit of a file whose requests are whole")
    }

    /// The files in the table.
    async fn files_in(sink: &TableSink) -> Vec<String> {
        let StreamTable::Delta(table) = sink.table() else {
            panic!("a Delta sink");
        };
        let snapshot = table.read_with_files().await.unwrap();
        let mut files: Vec<String> = snapshot.files.unwrap().keys().cloned().collect();
        files.sort();
        files
    }

    #[tokio::test]
    async fn a_keyed_request_reaching_a_batch_that_failed_withdraws_what_it_shares() {
        let sink = sink();
        assert_eq!(sink.start_keyed("k").await.unwrap(), None);
        assert!(sink.append_started("k"));
        // Batch 7 failed before the request's records reached it.
        sink.failed(7);
        sink.touched("k", 7);
        sink.touched("k", 8);
        sink.appended("k");
        let result = add(&sink, 8).await;
        assert!(
            matches!(result, Err(CommitError::Withdrawn { .. })),
            "batch 8 holds records of a request that lost some: {result:?}"
        );
        sink.end("k");
        assert!(files_in(&sink).await.is_empty());
        // Nothing of it is in, so a retry of it starts.
        assert_eq!(sink.start_keyed("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_keyed_request_whose_handler_leaves_mid_append_is_still_committed_whole_once() {
        let sink = sink();
        assert_eq!(sink.start_keyed("k").await.unwrap(), None);
        assert!(sink.append_started("k"));
        sink.touched("k", 1);
        // The client went away: its handler ends while the append goes on.
        sink.end("k");
        let first = tokio::spawn({
            let sink = sink.clone();
            async move { add(&sink, 1).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !first.is_finished(),
            "a file of a request still being appended waits for the rest"
        );
        assert!(files_in(&sink).await.is_empty());
        sink.touched("k", 2);
        sink.appended("k");
        let second = add(&sink, 2).await.unwrap();
        let first = first.await.unwrap().unwrap();
        assert!(matches!(first, Committed::Version(_)), "{first:?}");
        assert_eq!(first, second, "one commit holds the whole request");
        assert_eq!(files_in(&sink).await, ["1.parquet", "2.parquet"]);
        // Its key is kept: a retry appends nothing.
        assert_eq!(
            sink.start_keyed("k").await.unwrap(),
            Some(KeyedRequest::Committed)
        );
    }
}
