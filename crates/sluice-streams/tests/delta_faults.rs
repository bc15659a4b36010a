//! Delta commits and log reads that go wrong, on an in-memory store with
//! faults a real server cannot be made to produce on demand: a commit that
//! lands and whose answer is lost, a retry of it refused by its own
//! precondition, a commit that fails while another commit of the same
//! transaction lands, and a log version that fails to read once. The writer
//! must say exactly what is in the table (its files when its commit is the
//! one in the log, never when another's is), and a reader must see every
//! version once it can read it. Also what a checkpoint keeps of the
//! transactions (idempotency keys for their retention, the rest for good).

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::json;
use sluice_store::ObjectStore;
use sluice_streams::table::announce::{EngineListener, FileOrigin};
use sluice_streams::table::delta::{Committed, DeltaTable, NewFile, TableError, Transaction};
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use sluice_upload::{Announcer, Engine, EngineConfig, Intent, Origin, UploadKind, UploadOutcome};

use common::{file, layout, schema, table_files};

const LOG: &str = "events/_delta_log/";

fn step(app_id: &str, after: Option<i64>, version: i64) -> Transaction {
    Transaction::new(app_id, after, version)
}

#[tokio::test]
async fn a_commit_that_landed_is_the_writers_whatever_its_answer() {
    // (what the commit's PUT meets, what the writer must say)
    let cases = [
        (Fault::AnswerLost, Committed::Version(1)),
        (Fault::LandsThenRefused, Committed::Version(1)),
    ];
    for (fault, want) in cases {
        let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let faulty = FaultyStore::new(memory.clone());
        let table = DeltaTable::new(Arc::new(faulty.clone()), layout());
        let app_id = "sluice-events-writer";
        let first = table
            .commit(&[file("a")], &[step(app_id, None, 1)], &schema())
            .await
            .unwrap();
        assert_eq!(first, Committed::Version(0));
        faulty.inject_under(Op::Put, LOG, Some(1), fault);
        let second = table
            .commit(&[file("b")], &[step(app_id, Some(1), 2)], &schema())
            .await;
        assert_eq!(second.unwrap(), want, "{fault:?}");
        let (files, snapshot) = table_files(memory).await;
        let version = snapshot.txns.get(app_id).copied();
        assert_eq!(
            files,
            ["events/a.parquet", "events/b.parquet"]
                .map(String::from)
                .into()
        );
        assert_eq!(version, Some(2), "{fault:?}");
    }
}

#[tokio::test]
async fn a_failed_commit_never_takes_another_commit_of_its_transaction_for_its_own() {
    // A writer's commit hangs and fails; meanwhile an earlier attempt of the
    // same transaction (one it took for failed) lands with other files. The
    // writer must not report its files as in.
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let faulty = FaultyStore::new(memory.clone());
    let writer = Arc::new(DeltaTable::new(Arc::new(faulty.clone()), layout()));
    let late = DeltaTable::new(memory.clone(), layout());
    let app_id = "sluice-events-writer";
    writer
        .commit(&[file("a")], &[step(app_id, None, 1)], &schema())
        .await
        .unwrap();
    late.snapshot().await.unwrap();
    faulty.inject_under(
        Op::Put,
        LOG,
        Some(1),
        Fault::FailsLate(Duration::from_secs(5)),
    );
    let puts_before = faulty.attempts(Op::Put, None);
    let hanging = tokio::spawn({
        let writer = writer.clone();
        async move {
            writer
                .commit(&[file("b")], &[step(app_id, Some(1), 2)], &schema())
                .await
        }
    });
    // The writer's commit is in flight (hanging) once its PUT is seen.
    while faulty.attempts(Op::Put, None) < puts_before + 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let landed = late
        .commit(&[file("c")], &[step(app_id, Some(1), 2)], &schema())
        .await
        .unwrap();
    assert_eq!(landed, Committed::Version(1));
    assert!(
        !hanging.is_finished(),
        "the other commit landed while the writer's was in flight"
    );
    let result = hanging.await.unwrap();
    assert!(
        matches!(
            result,
            Ok(Committed::Already) | Err(TableError::Store { .. })
        ),
        "the writer's files are not in, and it must not say they are: {result:?}"
    );
    let (files, snapshot) = table_files(memory).await;
    let version = snapshot.txns.get(app_id).copied();
    assert_eq!(
        files,
        ["events/a.parquet", "events/c.parquet"]
            .map(String::from)
            .into()
    );
    assert_eq!(version, Some(2));
}

#[tokio::test]
async fn a_log_read_that_fails_hides_no_version_from_the_next_read() {
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let writer = DeltaTable::new(memory.clone(), layout());
    let faulty = FaultyStore::new(memory.clone());
    let reader = DeltaTable::new(Arc::new(faulty.clone()), layout());
    let app_id = "sluice-events-writer";
    let mut last = None;
    let mut commit = |n: i64| {
        let transactions = [step(app_id, last, n)];
        last = Some(n);
        let writer = &writer;
        async move {
            writer
                .commit(&[file(&n.to_string())], &transactions, &schema())
                .await
                .unwrap()
        }
    };
    commit(1).await;
    assert_eq!(reader.snapshot().await.unwrap().version, Some(0));
    commit(2).await;
    commit(3).await;
    // Version 1 cannot be read once; version 2 can.
    faulty.inject_under(
        Op::Get,
        &format!("{LOG}00000000000000000001.json"),
        Some(1),
        Fault::ServerError,
    );
    assert!(reader.snapshot().await.is_err());
    let snapshot = reader.snapshot().await.unwrap();
    assert_eq!(snapshot.version, Some(2));
    assert_eq!(snapshot.txns.get(app_id).copied(), Some(3));
}

/// A commit is applied to a reader's snapshot as its body arrives: one whose
/// body breaks off midway (its version begun, its transaction not yet
/// taken) fails the read, and one that stalls there until the reader gives
/// up (its future dropped) leaves nothing behind either: the next read sees
/// the whole version, not half of it.
#[tokio::test(start_paused = true)]
async fn a_commit_read_that_stops_midway_is_read_again_whole() {
    // (case, what the commit's body does after the transaction's line starts)
    let cases = [("breaks off", true), ("stalls, the read dropped", false)];
    for (case, breaks_off) in cases {
        let memory = MemoryStore::new();
        let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
        let writer = DeltaTable::new(store.clone(), layout());
        let faulty = FaultyStore::new(store.clone());
        let reader = DeltaTable::new(Arc::new(faulty.clone()), layout());
        let app_id = "sluice-events-writer";
        writer
            .commit(&[file("0")], &[step(app_id, None, 1)], &schema())
            .await
            .unwrap();
        assert_eq!(reader.snapshot().await.unwrap().version, Some(0));
        writer
            .commit(&[file("1")], &[step(app_id, Some(1), 2)], &schema())
            .await
            .unwrap();
        let commit = format!("{LOG}00000000000000000001.json");
        let body = memory.object(&commit).unwrap();
        let text = std::str::from_utf8(&body).unwrap();
        let txn = text.find("{\"txn\"").unwrap() as u64;
        let fault = match breaks_off {
            true => Fault::CutBody(txn + 5),
            false => Fault::StallBody(txn + 5),
        };
        faulty.inject_under(Op::Get, &commit, Some(1), fault);
        let first = tokio::time::timeout(Duration::from_secs(30), reader.snapshot()).await;
        match breaks_off {
            true => assert!(matches!(first, Ok(Err(_))), "{case}: {first:?}"),
            false => assert!(first.is_err(), "{case}: {first:?}"),
        }
        let cached = reader.snapshot().await.unwrap();
        assert_eq!(cached.version, Some(1), "{case}");
        assert_eq!(cached.txns.get(app_id).copied(), Some(2), "{case}");
    }
}

#[tokio::test]
async fn checkpoints_keep_idempotency_keys_for_their_retention_and_every_other_transaction() {
    use sluice_streams::table::delta::{key_txn, KEY_RETENTION};
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let table = DeltaTable::new(memory.clone(), layout());
    let (writer, fresh, old) = (
        "sluice-events-writer",
        key_txn("events", "fresh"),
        key_txn("events", "old"),
    );
    table
        .commit(
            &[file("a")],
            &[step(writer, None, 1), step(&fresh, None, 1)],
            &schema(),
        )
        .await
        .unwrap();
    // Another writer's commit of a key, a day past the retention, and of
    // transactions that are not keys, as old: Kafka partitions (a topic may
    // be named `request-logs`).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let long_ago = now - KEY_RETENTION.as_millis() as i64 - 24 * 3600 * 1000;
    let commit = [
        json!({"commitInfo": {"timestamp": now}}),
        json!({"txn": {"appId": old, "version": 1, "lastUpdated": long_ago}}),
        json!({"txn": {"appId": "sluice-group-topic-3", "version": 40, "lastUpdated": long_ago}}),
        json!({"txn": {"appId": "sluice-events-request-logs-3", "version": 41, "lastUpdated": long_ago}}),
    ]
    .map(|action| format!("{action}\n"))
    .concat();
    memory
        .put_object(sluice_store::PutRequest::new(
            format!("{LOG}00000000000000000001.json"),
            commit.into_bytes(),
        ))
        .await
        .unwrap();
    assert_eq!(table.checkpoint().await.unwrap(), 1);
    for version in 0..=1 {
        memory
            .delete_object(&format!("{LOG}{version:020}.json"))
            .await
            .unwrap();
    }
    // (transaction, its version read from the checkpoint alone)
    let cases = [
        (writer.to_string(), Some(1)),
        (fresh.clone(), Some(1)),
        ("sluice-group-topic-3".to_string(), Some(40)),
        ("sluice-events-request-logs-3".to_string(), Some(41)),
        (old.clone(), None),
    ];
    let snapshot = DeltaTable::new(memory, layout()).snapshot().await.unwrap();
    for (app_id, want) in cases {
        assert_eq!(snapshot.txns.get(&app_id).copied(), want, "{app_id}");
    }
    assert!(
        snapshot
            .txn_updated
            .get(&fresh)
            .is_some_and(|&at| at > long_ago),
        "the time a key was committed survives the checkpoint"
    );
}

/// What an announcer heard, in order: `intend <key>` (with whether the log
/// held a commit yet), `made <key>`, `abandoned <key>`.
#[derive(Default)]
struct Heard {
    log: Mutex<Vec<String>>,
    store: OnceLock<Arc<dyn ObjectStore>>,
}

#[async_trait::async_trait]
impl Announcer for Heard {
    async fn intend(&self, intent: &Intent) -> Result<(), sluice_store::StoreError> {
        let store = self.store.get().expect("the store");
        let committed = !store.list_objects(LOG, None, 10).await?.objects.is_empty();
        let at = if committed {
            "after a commit"
        } else {
            "before any commit"
        };
        self.note(format!("intend {} {at}", intent.key));
        Ok(())
    }
    async fn made(&self, intent: &Intent, _made: &UploadOutcome) {
        self.note(format!("made {}", intent.key));
    }
    async fn abandoned(&self, intent: &Intent) {
        self.note(format!("abandoned {}", intent.key));
    }
    async fn found(&self, intent: &Intent, _made: &UploadOutcome) {
        self.note(format!("found {}", intent.key));
    }
}

impl Heard {
    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// `file(name)`, announced once committed.
fn announced(name: &str) -> NewFile {
    let mut file = file(name);
    file.announce_as = Some(Arc::new(FileOrigin {
        origin: Origin::new(UploadKind::StreamBatch),
        outcome: UploadOutcome {
            key: file.key.clone(),
            size: file.size,
            etag: "\"e\"".into(),
            checksum: None,
            parts: 0,
        },
    }));
    file
}

/// (case, files, transaction, fault on the commit, what the commit says
/// (Err: which error), what the announcer hears)
type AnnouncedCommit = (
    &'static str,
    Vec<NewFile>,
    Transaction,
    Option<Fault>,
    Result<Committed, &'static str>,
    Vec<&'static str>,
);

/// Issue 47: a table's files are announced by the commit that adds them:
/// an intent each before the commit is written, their events once the log
/// holds them (a lost answer included); a commit another writer's fenced
/// out abandons them; one whose end nobody can tell leaves them to the
/// reconciliation. Files without an origin are not announced.
#[tokio::test]
async fn a_commit_announces_the_files_it_adds_and_only_those() {
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let faulty = FaultyStore::new(memory.clone());
    let heard = Arc::new(Heard::default());
    let _ = heard.store.set(memory.clone());
    let engine = Engine::new(Arc::new(faulty.clone()), EngineConfig::default()).unwrap();
    engine.set_announcer(heard.clone());
    let table = DeltaTable::new(Arc::new(faulty.clone()), layout())
        .listened_by(Arc::new(EngineListener::new(engine)));
    let app_id = "sluice-events-writer";
    let cases: Vec<AnnouncedCommit> = vec![
        (
            "committed",
            vec![announced("a"), announced("b"), file("plain")],
            step(app_id, None, 1),
            None,
            Ok(Committed::Version(0)),
            vec![
                "intend events/a.parquet before any commit",
                "intend events/b.parquet before any commit",
                "made events/a.parquet",
                "made events/b.parquet",
            ],
        ),
        (
            "its answer lost",
            vec![announced("c")],
            step(app_id, Some(1), 2),
            Some(Fault::AnswerLost),
            Ok(Committed::Version(1)),
            vec![
                "intend events/c.parquet after a commit",
                "made events/c.parquet",
            ],
        ),
        (
            "fenced",
            vec![announced("d")],
            step(app_id, Some(1), 3),
            None,
            Err("fenced"),
            vec![
                "intend events/d.parquet after a commit",
                "abandoned events/d.parquet",
            ],
        ),
        (
            "unknown",
            vec![announced("e")],
            step(app_id, Some(2), 3),
            Some(Fault::ServerError),
            Err("store"),
            vec!["intend events/e.parquet after a commit"],
        ),
    ];
    for (case, files, transaction, fault, want, heard_lines) in cases {
        if let Some(fault) = fault {
            faulty.inject_under(Op::Put, LOG, Some(1), fault);
        }
        let committed = table.commit(&files, &[transaction], &schema()).await;
        match (&committed, want) {
            (Ok(got), Ok(want)) => assert_eq!(*got, want, "{case}"),
            (Err(TableError::Fenced { .. }), Err("fenced")) => {}
            (Err(TableError::Store { .. }), Err("store")) => {}
            (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
        }
        assert_eq!(heard.take(), heard_lines, "{case}");
    }
}

/// A small Parquet file of one `long` column `n` holding `values`, stored
/// at `events/{name}.parquet`; its `NewFile`.
async fn parquet_file(store: &dyn ObjectStore, name: &str, values: &[i64]) -> NewFile {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    let batch = RecordBatch::try_from_iter([(
        "n",
        Arc::new(Int64Array::from(values.to_vec())) as ArrayRef,
    )])
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let mut new = file(name);
    new.size = bytes.len() as u64;
    new.records = values.len() as u64;
    store
        .put_object(sluice_store::PutRequest::new(new.key.clone(), bytes))
        .await
        .unwrap();
    new
}

/// A table of three small files (a, b, c: two rows each) in one commit, on a
/// memory store behind a fault wrapper: what the compaction tests start from.
async fn three_small_files() -> (Arc<dyn ObjectStore>, FaultyStore, DeltaTable) {
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let faulty = FaultyStore::new(memory.clone());
    let table = DeltaTable::new(Arc::new(faulty.clone()), layout());
    let mut files = Vec::new();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        files.push(parquet_file(memory.as_ref(), name, &[i as i64, 10 + i as i64]).await);
    }
    table.commit(&files, &[], &schema()).await.unwrap();
    (memory, faulty, table)
}

/// Issue 48: compaction had a commit loop of its own, which took its own
/// commit landed with a lost answer (refused on its retry by its own
/// If-None-Match) for "another writer removed this file", and left the
/// compacted file an orphan although the log held it. It commits through the
/// table's one commit path now: the commit is recognised as its own.
#[tokio::test]
async fn a_compaction_whose_answer_was_lost_is_its_own() {
    for fault in [Fault::LandsThenRefused, Fault::AnswerLost] {
        let (memory, faulty, table) = three_small_files().await;
        faulty.inject_under(Op::Put, LOG, Some(1), fault);
        let report = table
            .compact(sluice_streams::table::delta::upkeep::CompactOptions {
                target_bytes: 1 << 20,
                min_files: 2,
            })
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        assert_eq!(
            (report.removed, report.added, report.version),
            (3, 1, Some(1)),
            "{fault:?}"
        );
        let (in_table, snapshot) = table_files(memory).await;
        assert_eq!(snapshot.version, Some(1), "{fault:?}");
        assert_eq!(in_table.len(), 1, "{fault:?}: {in_table:?}");
    }
}

/// Found in review (issue 48): another engine's DELETE on a table with
/// deletion vectors removes a file and adds it again under its path, its
/// deleted rows in a vector. A compaction planned before that DELETE and
/// committed after it still found the path, and committed: its rewrite
/// brought the deleted rows back (and another reader kept the file too). A
/// removed file must still be the file the compaction read.
#[tokio::test]
async fn a_compaction_does_not_bring_back_rows_deleted_meanwhile() {
    let (memory, faulty, table) = three_small_files().await;
    // The compacted file's store waits; meanwhile the DELETE lands.
    let puts = faulty.attempts(Op::Put, None);
    faulty.inject_under(
        Op::Put,
        "events/part-compacted",
        Some(1),
        Fault::Delay(std::time::Duration::from_secs(3)),
    );
    let compaction = tokio::spawn(async move {
        table
            .compact(sluice_streams::table::delta::upkeep::CompactOptions {
                target_bytes: 1 << 20,
                min_files: 2,
            })
            .await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while faulty.attempts(Op::Put, None) == puts {
        assert!(
            std::time::Instant::now() < deadline,
            "compaction stored nothing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let delete = r#"{"commitInfo":{"operation":"DELETE","engineInfo":"Apache-Spark/4.2.0 Delta-Lake/4.4.0"}}
{"add":{"path":"a.parquet","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true,"stats":"{\"numRecords\":2}","deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":1,"sizeInBytes":34,"cardinality":1}}}
{"remove":{"path":"a.parquet","deletionTimestamp":2,"dataChange":true,"extendedFileMetadata":true,"partitionValues":{},"size":1}}
"#;
    memory
        .put_object(sluice_store::PutRequest::new(
            format!("{LOG}00000000000000000001.json"),
            delete.as_bytes().to_vec(),
        ))
        .await
        .unwrap();
    let refused = compaction.await.unwrap();
    match refused {
        Err(error) => assert!(error.to_string().contains("removed this file"), "{error}"),
        Ok(report) => panic!("compacted over the DELETE: {report:?}"),
    }
    let (in_table, snapshot) = table_files(memory).await;
    assert_eq!(snapshot.version, Some(1));
    assert_eq!(in_table.len(), 3, "{in_table:?}");
}

/// Issue 48: nothing checked that the store honours `If-None-Match`, which
/// every commit relies on (two writers of one version: both "win", and the
/// loser's files are vacuumed later). A table on a store that ignores it
/// refuses to commit, saying why, and writes nothing to the log.
#[tokio::test]
async fn a_store_that_ignores_if_none_match_is_refused_commits() {
    let memory: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let faulty = FaultyStore::new(memory.clone());
    faulty.ignore_conditions();
    let table = DeltaTable::new(Arc::new(faulty), layout());
    let refused = table
        .commit(
            &[file("a")],
            &[step("sluice-events-writer", None, 1)],
            &schema(),
        )
        .await;
    match refused {
        Err(error) => assert!(error.to_string().contains("If-None-Match"), "{error}"),
        Ok(committed) => panic!("committed {committed:?} on a store that ignores If-None-Match"),
    }
    let log = memory.list_objects(LOG, None, 10).await.unwrap();
    assert!(log.objects.is_empty(), "{:?}", log.objects);
}
