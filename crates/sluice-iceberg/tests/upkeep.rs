//! Upkeep of Iceberg tables sluice writes: compaction (small files rewritten,
//! manifests merged) beside writers that append or compact meanwhile,
//! orphan-file removal, and an hour of commits every second kept small by
//! them and by snapshot expiry; what readers that are not sluice's
//! (pyiceberg, DuckDB) read after each, from a directory store.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use sluice_iceberg::compact::CompactOptions;
use sluice_iceberg::{Committed, IcebergTable, TableError};
use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::ObjectStore;
use sluice_testkit::{Fault, FaultyStore, Op};

mod common;
use common::{columns, layout, parquet_file, read_back, step};

/// A directory store under the system's temporary directory, removed when
/// dropped.
struct Scratch {
    root: std::path::PathBuf,
    store: Arc<dyn ObjectStore>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let store = Arc::new(FsStore::open(FsConfig::new(&root)).unwrap());
        Scratch { root, store }
    }

    fn table(&self, store: Arc<dyn ObjectStore>) -> IcebergTable {
        IcebergTable::new(store, layout(), &format!("file://{}", self.root.display()))
    }

    /// Appends one file of row `id` as transaction `w`'s `id + 1`-th commit
    /// (columns `id`, `name`, and `score` when `scored`; field ids in the
    /// file when `with_ids`).
    async fn append_row(&self, table: &IcebergTable, id: i64, scored: bool, with_ids: bool) -> u64 {
        let mut arrow = columns();
        let mut batch = vec![
            ("id", Arc::new(Int64Array::from(vec![id])) as ArrayRef),
            ("name", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        ];
        if scored {
            arrow = ArrowSchema::new(
                arrow
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .chain([Field::new("score", DataType::Int64, true)])
                    .collect::<Vec<_>>(),
            );
            batch.push((
                "score",
                Arc::new(Int64Array::from(vec![id * 10])) as ArrayRef,
            ));
        }
        // Ids in column order: the table's, as its columns were only ever
        // appended.
        let schema = sluice_iceberg::schema::Schema::from_arrow(&arrow)
            .unwrap()
            .0;
        let file = parquet_file(
            &self.root,
            &format!("f{id}-{}", uuid()),
            &schema,
            with_ids,
            batch,
        );
        let after = (id > 0).then_some(id);
        match table
            .append(&[file], &[step("w", after, id + 1)], &arrow)
            .await
            .unwrap()
        {
            Committed::Version(version) => version,
            Committed::Already => panic!("row {id}: already"),
        }
    }

    /// The data files under `data/` (committed or not).
    fn stored_data_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root.join("events/data"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn uuid() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The manifests of the table's current snapshot, and the rows they count.
async fn manifests(table: &IcebergTable) -> (usize, i64) {
    let (_, metadata) = table.load().await.unwrap().unwrap();
    let list = metadata.current_snapshot().unwrap().manifest_list.clone();
    let bytes = std::fs::read(list.strip_prefix("file://").unwrap()).unwrap();
    let manifests = sluice_iceberg::manifest::read_manifest_list(&bytes).unwrap();
    let rows = manifests
        .iter()
        .map(|m| m.added_rows + m.existing_rows)
        .sum();
    (manifests.len(), rows)
}

/// Both readers count `rows` rows with as many distinct ids, as the table's
/// latest version has it.
async fn readers_count(scratch: &Scratch, table: &IcebergTable, rows: i64) {
    let (version, _) = table.load().await.unwrap().unwrap();
    let Some(read) = read_back(&scratch.root, version, "id") else {
        return;
    };
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], rows, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], rows, "{reader}: {read}");
    }
}

const SMALL: CompactOptions = CompactOptions {
    target_bytes: 1 << 20,
    min_files: 4,
};

/// Twelve one-row files, the last six with a column added since and some
/// with field ids, become one file under the current schema with every row
/// and every value; the manifests are merged; both readers count every row.
/// An append after it lands on top, and the next compaction takes it in.
#[tokio::test]
async fn compaction_rewrites_small_files_and_readers_read_every_row() {
    let scratch = Scratch::new("iceberg-compact");
    let table = scratch.table(scratch.store.clone());
    for id in 0..12 {
        scratch.append_row(&table, id, id >= 6, id % 3 == 0).await;
    }
    assert_eq!(manifests(&table).await, (12, 12));
    let report = table.compact(SMALL).await.unwrap();
    assert_eq!((report.removed, report.added), (12, 1), "{report:?}");
    assert_eq!((report.files_before, report.files_after), (12, 1));
    assert_eq!(report.manifests, Some((12, 2)), "{report:?}");
    let files = table.data_files().await.unwrap();
    assert_eq!(files.len(), 1);
    assert!(files[0].contains("/data/compacted-"), "{files:?}");
    assert_eq!(manifests(&table).await.1, 12);
    // Every value, under the current schema's field ids.
    let path = files[0].strip_prefix("file://").unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap();
    let ids: Vec<String> = reader
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}={}", f.name(), f.metadata()["PARQUET:field_id"]))
        .collect();
    assert_eq!(ids, ["id=1", "name=2", "score=3"]);
    let mut scores = Vec::new();
    for batch in reader.build().unwrap() {
        let batch = batch.unwrap();
        let column = batch.column_by_name("score").unwrap();
        let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
        scores.extend(column.iter().flatten());
    }
    scores.sort();
    assert_eq!(scores, [60, 70, 80, 90, 100, 110]);
    readers_count(&scratch, &table, 12).await;

    scratch.append_row(&table, 12, true, false).await;
    // The compaction's record of what it removed is dropped by the next
    // snapshot: its own manifest and the append's.
    assert_eq!(manifests(&table).await, (2, 13));
    let report = table
        .compact(CompactOptions {
            min_files: 2,
            ..SMALL
        })
        .await
        .unwrap();
    assert_eq!((report.removed, report.added), (2, 1), "{report:?}");
    assert_eq!(table.data_files().await.unwrap().len(), 1);
    readers_count(&scratch, &table, 13).await;
    // Nothing left to do: no commit.
    let report = table.compact(SMALL).await.unwrap();
    assert_eq!(report.version, None, "{report:?}");
}

/// Where a compaction is held up while another writer commits.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// After planning: its new file's write is delayed.
    Planning,
    /// At its commit: its manifests stored, the write of its metadata
    /// version delayed; the version is taken meanwhile, and the compaction
    /// is made again on the table as it is then.
    Committing,
}

/// A compaction held up while another writer commits: an append that lands
/// first is kept (the compaction's commit is made on top of it); a
/// compaction that removed the same files first wins, and the late one is
/// refused by name, its file deleted.
#[tokio::test]
async fn compaction_beside_other_writers_loses_nothing() {
    type Meanwhile = for<'a> fn(
        &'a Scratch,
        &'a IcebergTable,
    )
        -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>;
    let append: Meanwhile = |scratch, other| {
        Box::pin(async move {
            scratch.append_row(other, 4, false, false).await;
        })
    };
    let compact: Meanwhile = |_, other| {
        Box::pin(async move {
            let report = other.compact(SMALL).await.unwrap();
            assert_eq!(report.removed, 4, "{report:?}");
        })
    };
    // (case, where it is held, what the other writer does, whether the held
    // compaction wins, rows after, data files after)
    let cases: [(&str, Hold, Meanwhile, bool, i64, usize); 4] = [
        (
            "an append while planning",
            Hold::Planning,
            append,
            true,
            5,
            2,
        ),
        (
            "a compaction while planning",
            Hold::Planning,
            compact,
            false,
            4,
            1,
        ),
        (
            "an append while committing",
            Hold::Committing,
            append,
            true,
            5,
            2,
        ),
        (
            "a compaction while committing",
            Hold::Committing,
            compact,
            false,
            4,
            1,
        ),
    ];
    for (case, hold, meanwhile, wins, rows, files) in cases {
        let scratch = Scratch::new("iceberg-compact-race");
        let other = scratch.table(scratch.store.clone());
        for id in 0..4 {
            scratch.append_row(&other, id, false, false).await;
        }
        let faulty = FaultyStore::new(scratch.store.clone());
        // Four appends on the version that made the table: v5 is the latest.
        let held_at = match hold {
            Hold::Planning => "events/data/compacted-",
            Hold::Committing => "events/metadata/v6.metadata.json",
        };
        faulty.inject_under(
            Op::Put,
            held_at,
            Some(1),
            Fault::Delay(Duration::from_secs(5)),
        );
        let lists = || {
            std::fs::read_dir(scratch.root.join("events/metadata"))
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with("snap-")
                })
                .count()
        };
        let held = scratch.table(Arc::new(faulty.clone()));
        let compaction = async {
            let result = held.compact(SMALL).await;
            let (version, _) = other.load().await.unwrap().unwrap();
            (result, version)
        };
        let other_writer = async {
            // Once the held compaction is where it is held.
            loop {
                let there = match hold {
                    Hold::Planning => faulty.attempts(Op::Put, None) > 0,
                    // Its manifest list is stored just before its version.
                    Hold::Committing => lists() > 4,
                };
                if there {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            meanwhile(&scratch, &other).await;
            other.load().await.unwrap().unwrap().0
        };
        let ((result, last), other_version) = tokio::join!(compaction, other_writer);
        match (wins, result) {
            (true, Ok(report)) => {
                assert_eq!(report.removed, 4, "{case}: {report:?}");
                assert!(report.version.unwrap() > other_version, "{case}: not held");
            }
            (false, Err(TableError::Upkeep { reason, .. })) => {
                assert!(
                    reason.contains("no longer in the table"),
                    "{case}: {reason}"
                );
                assert_eq!(last, other_version, "{case}: the late one committed");
            }
            (_, result) => panic!("{case}: {result:?}"),
        }
        let live = table_files(&other).await;
        assert_eq!(live.len(), files, "{case}: {live:?}");
        // What the table reads, and the four files its older snapshots
        // read (until they expire): the loser's file is gone.
        assert_eq!(scratch.stored_data_files().len(), files + 4, "{case}");
        assert_eq!(manifests(&other).await.1, rows, "{case}");
        // No manifest of a lost attempt is left: after an expiry of every
        // older snapshot, orphan-file removal finds nothing.
        other.expire_snapshots(Duration::ZERO, 1).await.unwrap();
        let orphans = other.remove_orphans(Duration::ZERO, true).await.unwrap();
        assert_eq!(orphans.deleted, Vec::<String>::new(), "{case}");
        readers_count(&scratch, &other, rows).await;
    }
}

/// A compaction whose commit's end it cannot tell (its version written,
/// the answer lost, the version unreadable when read back) fails, and
/// deletes nothing it wrote: the version holds its file, and the table
/// reads whole.
#[tokio::test]
async fn a_compaction_whose_commit_is_unknown_keeps_its_file() {
    let scratch = Scratch::new("iceberg-compact-unknown");
    let other = scratch.table(scratch.store.clone());
    for id in 0..4 {
        scratch.append_row(&other, id, false, false).await;
    }
    let faulty = FaultyStore::new(scratch.store.clone());
    faulty.inject_under(
        Op::Put,
        "events/metadata/v6.metadata.json",
        Some(1),
        Fault::AnswerLost,
    );
    faulty.inject_under(
        Op::Get,
        "events/metadata/v6.metadata.json",
        Some(1),
        Fault::Denied,
    );
    let held = scratch.table(Arc::new(faulty));
    let failed = held.compact(SMALL).await;
    assert!(
        matches!(failed, Err(TableError::Store { .. })),
        "{failed:?}"
    );
    let (version, _) = other.load().await.unwrap().unwrap();
    assert_eq!(version, 6, "the compaction's version");
    let live = table_files(&other).await;
    assert_eq!(live.len(), 1, "{live:?}");
    let key = live[0].strip_prefix("file://").unwrap();
    assert!(
        std::path::Path::new(key).exists(),
        "the committed file was deleted"
    );
    readers_count(&scratch, &other, 4).await;
}

async fn table_files(table: &IcebergTable) -> Vec<String> {
    let mut files = table.data_files().await.unwrap();
    files.sort();
    files
}

/// Files a writer stored and never committed (a data file, a manifest) are
/// deleted once older than the retention, and only they: what any snapshot
/// reads, metadata versions, the hint and hidden files stay; a dry run
/// deletes nothing. Both readers read the same table after it.
#[tokio::test]
async fn orphan_files_go_and_the_table_reads_the_same() {
    let scratch = Scratch::new("iceberg-orphans");
    let table = scratch.table(scratch.store.clone());
    for id in 0..3 {
        scratch.append_row(&table, id, false, false).await;
    }
    let write = |key: &str| {
        let path = scratch.root.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"orphan").unwrap();
    };
    let orphans = ["events/data/lost.parquet", "events/metadata/lost-m0.avro"];
    for key in orphans {
        write(key);
    }
    write("events/data/_notes.parquet");
    write("events/metadata/v99.json");
    // Statistics another engine wrote, named by the metadata apart from
    // the snapshots.
    write("events/metadata/partition-stats-1.parquet");
    let young = table
        .remove_orphans(Duration::from_secs(3600), false)
        .await
        .unwrap();
    assert_eq!((young.deleted.len(), young.kept_young), (0, 2), "{young:?}");
    let dry = table.remove_orphans(Duration::ZERO, true).await.unwrap();
    let mut deleted = dry.deleted.clone();
    deleted.sort();
    assert_eq!(
        deleted,
        ["events/data/lost.parquet", "events/metadata/lost-m0.avro"]
    );
    assert!(scratch.root.join(orphans[0]).exists(), "a dry run deleted");
    let report = table.remove_orphans(Duration::ZERO, false).await.unwrap();
    assert_eq!(report.deleted.len(), 2, "{report:?}");
    // Three data files, three manifests, three manifest lists.
    assert_eq!(report.referenced, 9, "{report:?}");
    for key in orphans {
        assert!(!scratch.root.join(key).exists(), "{key} is still there");
    }
    for key in [
        "events/data/_notes.parquet",
        "events/metadata/v99.json",
        "events/metadata/partition-stats-1.parquet",
        "events/metadata/v1.metadata.json",
        "events/metadata/version-hint.text",
    ] {
        assert!(scratch.root.join(key).exists(), "{key} was deleted");
    }
    readers_count(&scratch, &table, 3).await;
    // After a compaction and an expiry, what is left is what the table reads.
    table
        .compact(CompactOptions {
            min_files: 2,
            ..SMALL
        })
        .await
        .unwrap();
    table.expire_snapshots(Duration::ZERO, 1).await.unwrap();
    let after = table.remove_orphans(Duration::ZERO, false).await.unwrap();
    assert_eq!(after.deleted, Vec::<String>::new(), "expiry left {after:?}");
    assert_eq!(scratch.stored_data_files().len(), 2); // _notes and the compacted file
    readers_count(&scratch, &table, 3).await;
}

/// The table's clock in the hour test: a second per commit.
static CLOCK_MS: AtomicI64 = AtomicI64::new(0);

fn test_clock() -> i64 {
    CLOCK_MS.load(Ordering::Relaxed)
}

/// An hour of commits every second (3,600, a row each, on a clock that
/// moves a second per commit), with the writer's own snapshot expiry (every
/// 100 versions, by the table's `history.expire.max-snapshot-age-ms`, here
/// 15 minutes) and a compaction every 5 minutes as a cron job would run
/// `sluice tables compact`: the current snapshot reads at most 100
/// manifests, the metadata stays under 1 MiB, and both readers count every
/// row once.
#[tokio::test]
async fn an_hour_of_commits_every_second_stays_small_and_whole() {
    const COMMITS: i64 = 3600;
    let scratch = Scratch::new("iceberg-hour");
    CLOCK_MS.store(1_800_000_000_000, Ordering::Relaxed);
    let table = Arc::new(scratch.table(scratch.store.clone()).with_clock(test_clock));
    let mut largest_metadata = 0;
    let mut most_manifests = 0;
    for id in 0..COMMITS {
        CLOCK_MS.fetch_add(1000, Ordering::Relaxed);
        let version = scratch.append_row(&table, id, false, false).await;
        if id == 0 {
            let (_, metadata) = table.load().await.unwrap().unwrap();
            let uuid = metadata.table_uuid.clone();
            table
                .commit_updates(
                    &[serde_json::from_value::<sluice_iceberg::updates::Requirement>(serde_json::json!({"type": "assert-table-uuid", "uuid": uuid})).unwrap()],
                    &[serde_json::json!({"action": "set-properties", "updates": {"history.expire.max-snapshot-age-ms": "900000"}})],
                )
                .await
                .unwrap();
        }
        table.after_commit(version);
        if id % 300 == 299 {
            table.compact(CompactOptions::default()).await.unwrap();
        }
        if id % 100 == 99 {
            // Let the writer's expiry run.
            tokio::task::yield_now().await;
            let (version, _) = table.load().await.unwrap().unwrap();
            let size = std::fs::metadata(
                scratch
                    .root
                    .join(format!("events/metadata/v{version}.metadata.json")),
            )
            .unwrap()
            .len();
            largest_metadata = largest_metadata.max(size);
            most_manifests = most_manifests.max(manifests(&table).await.0);
        }
    }
    let (count, rows) = manifests(&table).await;
    assert_eq!(rows, COMMITS);
    // Expiry ran: 15 minutes of snapshots and what the last 100 versions
    // made, compactions included.
    let (_, metadata) = table.load().await.unwrap().unwrap();
    assert!(
        metadata.snapshots.len() <= 1_100,
        "{} snapshots",
        metadata.snapshots.len()
    );
    assert!(count <= 100, "{count} manifests");
    assert!(most_manifests <= 100, "{most_manifests} manifests at most");
    assert!(
        largest_metadata < 1 << 20,
        "metadata of {largest_metadata} bytes"
    );
    assert_eq!(table.txn_version("w").await.unwrap(), Some(COMMITS));
    eprintln!("largest metadata {largest_metadata} bytes, at most {most_manifests} manifests, {} data files", table.data_files().await.unwrap().len());
    readers_count(&scratch, &table, COMMITS).await;
}
