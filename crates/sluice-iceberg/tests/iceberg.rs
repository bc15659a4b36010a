//! Iceberg tables committed to by sluice: exactly once through replays,
//! fenced writers, racing writers and lost answers (a memory store, faults
//! where a real server cannot be made to fail on cue), and what readers that
//! are not sluice's (pyiceberg, DuckDB) read from a directory store.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use sluice_iceberg::{Committed, IcebergTable, NewFile, TableError, Transaction};
use sluice_store::ObjectStore;
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};

mod common;
use common::{columns, layout, parquet_file, readers, step};

fn file(name: &str) -> NewFile {
    NewFile {
        key: format!("events/data/{name}.parquet"),
        size: 100,
        records: 10,
        announce_as: None,
        footer: None,
    }
}

/// A replayed commit changes nothing; one whose `after` another writer moved
/// is fenced; a new transaction starts from none.
#[tokio::test]
async fn commits_are_exactly_once() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let table = IcebergTable::new(store, layout(), "memory://bucket");
    let first = table
        .append(&[file("a")], &[step("w", None, 1)], &columns())
        .await
        .unwrap();
    assert_eq!(first, Committed::Version(2)); // version 1 made the table
                                              // (the commit, what it must do)
    let cases: Vec<(Vec<Transaction>, Result<Committed, &str>)> = vec![
        (vec![step("w", None, 1)], Ok(Committed::Already)),
        (vec![step("w", Some(5), 6)], Err("fenced")),
        (vec![step("w", Some(1), 2)], Ok(Committed::Version(3))),
        (vec![step("other", None, 7)], Ok(Committed::Version(4))),
        (
            vec![step("w", Some(1), 2), step("other", None, 7)],
            Ok(Committed::Already),
        ),
    ];
    for (transactions, want) in cases {
        let got = table.append(&[file("b")], &transactions, &columns()).await;
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{transactions:?}"),
            (Err(TableError::Fenced { .. }), Err("fenced")) => {}
            (got, want) => panic!("{transactions:?}: {got:?}, wanted {want:?}"),
        }
    }
    let (_, metadata) = table.load().await.unwrap().unwrap();
    let state = table.transactions(&metadata).unwrap();
    assert_eq!(state.get("w"), Some(&2));
    assert_eq!(state.get("other"), Some(&7));
    assert_eq!(table.data_files().await.unwrap().len(), 3);
}

/// `commits` commits of transaction `name`, one file each; their versions.
async fn commit_in_turn(table: &IcebergTable, name: &str, commits: i64) -> Vec<u64> {
    let mut versions = Vec::new();
    for n in 0..commits {
        let after = (n > 0).then_some(n);
        let files = [file(&format!("{name}{n}"))];
        match table
            .append(&files, &[step(name, after, n + 1)], &columns())
            .await
            .unwrap()
        {
            Committed::Version(v) => versions.push(v),
            Committed::Already => panic!("{name} {n}: already"),
        }
    }
    versions
}

/// Two writers committing at once never both take a version: every commit
/// of each lands, once, in a version of its own.
#[tokio::test]
async fn two_writers_never_take_one_version() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let a = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    let b = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    let commits = 10;
    let (va, vb) = tokio::join!(
        commit_in_turn(&a, "a", commits),
        commit_in_turn(&b, "b", commits)
    );
    let mut all: Vec<u64> = va.into_iter().chain(vb).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 2 * commits as usize, "{all:?}");
    let files = a.data_files().await.unwrap();
    assert_eq!(files.len(), 2 * commits as usize);
    let (_, metadata) = a.load().await.unwrap().unwrap();
    let state = a.transactions(&metadata).unwrap();
    assert_eq!((state["a"], state["b"]), (commits, commits));
}

/// A writer makes its next commit on the version it wrote last while the
/// store confirms that version is still the newest. When another writer
/// committed on top in between, what it made there goes (its manifest and
/// manifest list with it) and the commit is made again on the newest:
/// every commit lands once, and no file is left that no snapshot reads.
#[tokio::test]
async fn a_commit_made_on_a_passed_version_is_made_again_on_the_newest() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let a = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    let b = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    let cases: [(&IcebergTable, &str, Transaction, u64); 5] = [
        (&a, "a0", step("a", None, 1), 2), // version 1 made the table
        (&b, "b0", step("b", None, 1), 3),
        (&a, "a1", step("a", Some(1), 2), 4),
        (&a, "a2", step("a", Some(2), 3), 5),
        (&b, "b1", step("b", Some(1), 2), 6),
    ];
    for (writer, name, transaction, version) in cases {
        let got = writer
            .append(&[file(name)], &[transaction], &columns())
            .await
            .unwrap();
        assert_eq!(got, Committed::Version(version), "{name}");
    }
    let mut files = a.data_files().await.unwrap();
    files.sort();
    assert_eq!(
        files,
        ["a0", "a1", "a2", "b0", "b1"].map(|n| format!("memory://bucket/events/data/{n}.parquet"))
    );
    let orphans = a
        .remove_orphans(std::time::Duration::ZERO, true)
        .await
        .unwrap();
    assert_eq!(orphans.deleted, Vec::<String>::new(), "{orphans:?}");
    let (_, metadata) = b.load().await.unwrap().unwrap();
    let state = b.transactions(&metadata).unwrap();
    assert_eq!((state["a"], state["b"]), (3, 2));
}

/// A commit that lands and whose answer is lost is the writer's (its bytes
/// are the version's): reported once, as its version, never committed
/// again, with or without transactions. Its retry may be refused by its own
/// precondition (a 412), which reads as another writer's win unless the
/// version is read back (review finding: it came back `Already`, and without
/// transactions its files were appended twice).
#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_its_own() {
    // (case, what the commit's write meets, its transactions)
    let cases = [
        ("answer lost", Fault::AnswerLost, true),
        (
            "its retry refused by its own write",
            Fault::LandsThenRefused,
            true,
        ),
        (
            "refused by its own write, no transactions",
            Fault::LandsThenRefused,
            false,
        ),
    ];
    for (case, fault, with_transactions) in cases {
        let memory = MemoryStore::new();
        let faulty = FaultyStore::new(Arc::new(memory.clone()));
        let table = IcebergTable::new(Arc::new(faulty.clone()), layout(), "memory://bucket");
        let steps = |after, version| match with_transactions {
            true => vec![step("w", after, version)],
            false => Vec::new(),
        };
        table
            .append(&[file("a")], &steps(None, 1), &columns())
            .await
            .unwrap();
        faulty.inject_under(Op::Put, "events/metadata/v3.metadata.json", Some(1), fault);
        let got = table
            .append(&[file("b")], &steps(Some(1), 2), &columns())
            .await
            .unwrap();
        assert_eq!(got, Committed::Version(3), "{case}");
        assert_eq!(table.data_files().await.unwrap().len(), 2, "{case}");
        let (version, _) = table.load().await.unwrap().unwrap();
        assert_eq!(version, 3, "{case}");
    }
}

/// A partitioned table (another writer's) is refused by name, and so are a
/// column whose type changes and nulls for a required column.
#[tokio::test]
async fn what_sluice_cannot_write_is_refused_by_name() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let table = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    table.append(&[file("a")], &[], &columns()).await.unwrap();
    // (the stream's id column, what the refusal names)
    let cases = [
        (Field::new("id", DataType::Utf8, false), "column id is long"),
        (
            Field::new("id", DataType::Int64, true),
            "column id is required",
        ),
    ];
    for (column, named) in cases {
        let stream = ArrowSchema::new(vec![column]);
        let error = table.append(&[file("b")], &[], &stream).await.unwrap_err();
        assert!(error.to_string().contains(named), "{error}");
    }
    let (version, mut metadata) = table.load().await.unwrap().unwrap();
    metadata.partition_specs = vec![serde_json::json!({"spec-id": 0, "fields": [
        {"source-id": 1, "field-id": 1000, "name": "id_bucket", "transform": "bucket[4]"}]})];
    store
        .put_object(sluice_store::PutRequest::new(
            format!("events/metadata/v{}.metadata.json", version + 1),
            serde_json::to_vec(&metadata).unwrap(),
        ))
        .await
        .unwrap();
    let error = table
        .append(&[file("c")], &[], &columns())
        .await
        .unwrap_err();
    assert!(matches!(error, TableError::Partitioned { .. }), "{error}");
}

/// pyiceberg and DuckDB read a table sluice made, appended to and expired
/// the first snapshot of, a column added by the second commit (older rows
/// null in it). The second file has
/// no field ids (as a stream's Parquet files): readers find its columns
/// through the table's name mapping (`schema.name-mapping.default`, which
/// sluice keeps up to date; without it pyiceberg fails on that file).
#[tokio::test]
async fn readers_read_what_sluice_commits() {
    let Some((clients, python)) = readers() else {
        eprintln!("SKIPPED: no Python readers (run scripts/test.sh)");
        return;
    };
    let root = std::env::temp_dir().join(format!("sluice-iceberg-readers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(sluice_store::fs::FsStore::open(sluice_store::fs::FsConfig::new(&root)).unwrap());
    let table = IcebergTable::new(store, layout(), &format!("file://{}", root.display()));
    let (schema, _) = sluice_iceberg::schema::Schema::from_arrow(&columns()).unwrap();
    let first = parquet_file(
        &root,
        "a",
        &schema,
        true,
        vec![
            ("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "name",
                Arc::new(StringArray::from(vec!["one", "two", "three"])) as ArrayRef,
            ),
        ],
    );
    table
        .append(&[first], &[step("w", None, 1)], &columns())
        .await
        .unwrap();
    let wider = ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
    ]);
    let mut wider_schema = schema.clone();
    let mut last = 2;
    wider_schema = wider_schema
        .merged(&wider, &mut last)
        .unwrap()
        .unwrap_or(wider_schema);
    let second = parquet_file(
        &root,
        "b",
        &wider_schema,
        false,
        vec![
            ("id", Arc::new(Int64Array::from(vec![4, 5])) as ArrayRef),
            (
                "name",
                Arc::new(StringArray::from(vec!["four", "five"])) as ArrayRef,
            ),
            (
                "source",
                Arc::new(StringArray::from(vec!["kafka", "http"])) as ArrayRef,
            ),
        ],
    );
    let committed = table
        .append(&[second], &[step("w", Some(1), 2)], &wider)
        .await
        .unwrap();
    assert_eq!(committed, Committed::Version(3));
    // The first snapshot expired: readers of the table as it is now lose
    // nothing.
    let expiry = table
        .expire_snapshots(std::time::Duration::ZERO, 1)
        .await
        .unwrap();
    assert_eq!((expiry.version, expiry.snapshots_dropped), (Some(4), 1));
    let metadata = root.join("events/metadata/v4.metadata.json");
    let output = std::process::Command::new(python)
        .arg(format!("{clients}/iceberg_read.py"))
        .arg(format!("file://{}", metadata.display()))
        .arg("id")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let want = serde_json::json!([
        {"id": 1, "name": "one", "source": null},
        {"id": 2, "name": "two", "source": null},
        {"id": 3, "name": "three", "source": null},
        {"id": 4, "name": "four", "source": "kafka"},
        {"id": 5, "name": "five", "source": "http"},
    ]);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], want, "{reader}: {read}");
    }
    assert_eq!(read["snapshots"], 1, "{read}");
    assert_eq!(
        read["field_ids"],
        serde_json::json!({"id": 1, "name": 2, "source": 3})
    );
}

/// The version hint only saves a listing: one that lags, is ahead of the
/// table, is not a number or is missing still finds the latest version.
#[tokio::test]
async fn the_latest_version_is_found_whatever_the_hint_says() {
    let memory = MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    let table = IcebergTable::new(store.clone(), layout(), "memory://bucket");
    for name in ["a", "b", "c"] {
        table.append(&[file(name)], &[], &columns()).await.unwrap();
    }
    let hint = "events/metadata/version-hint.text";
    for written in [Some("1"), Some("99"), Some("junk"), None] {
        match written {
            Some(text) => {
                let put = sluice_store::PutRequest::new(hint, text.as_bytes().to_vec());
                store.put_object(put).await.unwrap();
            }
            None => store.delete_object(hint).await.unwrap(),
        }
        let (version, _) = table.load().await.unwrap().unwrap();
        assert_eq!(version, 4, "hint {written:?}");
    }
}

/// Snapshot expiry drops the old snapshots but the newest ones asked for,
/// deletes their manifest lists, and keeps every data file a kept snapshot
/// reads (sluice only appends: all of them); the table reads the same, and
/// an append right after it commits on top. A second expiry finds nothing.
#[tokio::test]
async fn expired_snapshots_go_and_the_table_stays_whole() {
    let memory = MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    let table = IcebergTable::new(store, layout(), "memory://bucket");
    for n in 0..5 {
        table
            .append(&[file(&format!("f{n}"))], &[], &columns())
            .await
            .unwrap();
    }
    let lists = |memory: &MemoryStore| {
        memory
            .keys_under("events/metadata/")
            .into_iter()
            .filter(|k| k.contains("/snap-"))
            .count()
    };
    assert_eq!(lists(&memory), 5);
    let report = table
        .expire_snapshots(std::time::Duration::ZERO, 2)
        .await
        .unwrap();
    assert_eq!(report.snapshots_dropped, 3, "{report:?}");
    // Their manifest lists; every manifest and data file is still read.
    assert_eq!(report.files_deleted, 3, "{report:?}");
    assert_eq!(lists(&memory), 2);
    let (_, metadata) = table.load().await.unwrap().unwrap();
    assert_eq!(metadata.snapshots.len(), 2);
    assert_eq!(metadata.snapshot_log.len(), 2);
    assert_eq!(table.data_files().await.unwrap().len(), 5);
    table
        .append(&[file("after")], &[], &columns())
        .await
        .unwrap();
    assert_eq!(table.data_files().await.unwrap().len(), 6);
    let again = table
        .expire_snapshots(std::time::Duration::from_secs(3600), 2)
        .await
        .unwrap();
    assert_eq!(again, sluice_iceberg::upkeep::ExpiryReport::default());
}

/// A commit that stops between its store writes (the manifest and the list
/// stored, the metadata version refused for good: a writer killed there
/// leaves the same) changes nothing readers see; the next commit lands on
/// top, and the stopped one's files are in no snapshot.
#[tokio::test]
async fn a_commit_stopped_before_its_metadata_changes_nothing() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone()));
    let table = IcebergTable::new(Arc::new(faulty.clone()), layout(), "memory://bucket");
    table
        .append(&[file("a")], &[step("w", None, 1)], &columns())
        .await
        .unwrap();
    faulty.inject_under(
        Op::Put,
        "events/metadata/v3.metadata.json",
        Some(1),
        Fault::Denied,
    );
    let stopped = table
        .append(&[file("lost")], &[step("w", Some(1), 2)], &columns())
        .await;
    assert!(stopped.is_err(), "{stopped:?}");
    let (version, metadata) = table.load().await.unwrap().unwrap();
    assert_eq!(version, 2);
    assert_eq!(table.transactions(&metadata).unwrap()["w"], 1);
    let got = table
        .append(&[file("b")], &[step("w", Some(1), 2)], &columns())
        .await
        .unwrap();
    assert_eq!(got, Committed::Version(3));
    let files = table.data_files().await.unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| !f.contains("lost")), "{files:?}");
}

/// A streaming table's one manifest per commit is merged once the table has
/// 100 (Iceberg's `commit.manifest.min-count-to-merge`): after 250 commits of
/// one file each, the current snapshot reads few manifests, every file once,
/// and pyiceberg and DuckDB count every row (the merged manifests' entries
/// are existing ones, their snapshot ids and sequence numbers written in).
#[tokio::test]
async fn manifests_are_merged_and_readers_read_every_row() {
    const COMMITS: i64 = 250;
    let root = std::env::temp_dir().join(format!("sluice-iceberg-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let store: Arc<dyn ObjectStore> =
        Arc::new(sluice_store::fs::FsStore::open(sluice_store::fs::FsConfig::new(&root)).unwrap());
    let table = IcebergTable::new(store, layout(), &format!("file://{}", root.display()));
    let (schema, _) = sluice_iceberg::schema::Schema::from_arrow(&columns()).unwrap();
    for n in 0..COMMITS {
        let file = parquet_file(
            &root,
            &format!("f{n}"),
            &schema,
            false,
            vec![
                ("id", Arc::new(Int64Array::from(vec![n])) as ArrayRef),
                ("name", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
            ],
        );
        let after = (n > 0).then_some(n);
        table
            .append(&[file], &[step("w", after, n + 1)], &columns())
            .await
            .unwrap();
    }
    let (version, metadata) = table.load().await.unwrap().unwrap();
    let snapshot = metadata.current_snapshot().unwrap();
    let list = std::fs::read(snapshot.manifest_list.strip_prefix("file://").unwrap()).unwrap();
    let manifests = sluice_iceberg::manifest::read_manifest_list(&list).unwrap();
    assert!(manifests.len() <= 100, "{} manifests", manifests.len());
    let mut files = table.data_files().await.unwrap();
    files.sort();
    files.dedup();
    assert_eq!(files.len(), COMMITS as usize, "every file once");
    let rows: i64 = manifests
        .iter()
        .map(|m| m.added_rows + m.existing_rows)
        .sum();
    assert_eq!(rows, COMMITS);
    let Some((clients, python)) = readers() else {
        std::fs::remove_dir_all(&root).unwrap();
        return;
    };
    let metadata = root.join(format!("events/metadata/v{version}.metadata.json"));
    let output = std::process::Command::new(python)
        .arg(format!("{clients}/iceberg_read.py"))
        .arg(format!("file://{}", metadata.display()))
        .arg("id")
        .arg("--count")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], COMMITS, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], COMMITS, "{reader}: {read}");
    }
}

/// Against a real MinIO (its `If-None-Match` decides who has each version):
/// two owners of one Kafka partition (a revoked member still running) race
/// for the same transaction, 24 rounds; exactly one commit wins each round,
/// the other is fenced or finds the offsets committed, and only the
/// winners' files are in the table.
#[tokio::test]
async fn owners_of_one_partition_race_on_minio_and_exactly_one_wins_each_round() {
    let Some(store) = sluice_testkit::minio::store("iceberg-zombies").await else {
        return;
    };
    let root = store.describe().trim_end_matches('/').to_owned();
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let owner = IcebergTable::new(store.clone(), layout(), &root);
    let zombie = IcebergTable::new(store.clone(), layout(), &root);
    let app_id = "sluice-group-topic-0";
    let mut at: Option<i64> = None;
    let mut winners = std::collections::BTreeSet::new();
    let mut wins = [0, 0];
    for round in 0..24i64 {
        // Both read the table as it is now.
        owner.latest().await.unwrap();
        zombie.latest().await.unwrap();
        // The two read the same messages; on odd rounds the zombie's batch
        // ended earlier (its own flush).
        let ends = [
            at.unwrap_or(0) + 1000,
            at.unwrap_or(0) + 1000 - 100 * (round % 2),
        ];
        let (a, b) = (
            file(&format!("{round}-owner")),
            file(&format!("{round}-zombie")),
        );
        let (owner_steps, zombie_steps, schema) = (
            [step(app_id, at, ends[0])],
            [step(app_id, at, ends[1])],
            columns(),
        );
        let by_owner = owner.append(std::slice::from_ref(&a), &owner_steps, &schema);
        let by_zombie = zombie.append(std::slice::from_ref(&b), &zombie_steps, &schema);
        // Who sends first alternates, so that each side wins some rounds.
        let (by_owner, by_zombie) = if round % 4 < 2 {
            tokio::join!(by_owner, by_zombie)
        } else {
            let (z, o) = tokio::join!(by_zombie, by_owner);
            (o, z)
        };
        let lost = |r: &Result<Committed, TableError>| {
            matches!(r, Err(TableError::Fenced { .. }) | Ok(Committed::Already))
        };
        let winner = match (&by_owner, &by_zombie) {
            (Ok(Committed::Version(_)), theirs) if lost(theirs) => 0,
            (ours, Ok(Committed::Version(_))) if lost(ours) => 1,
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        };
        winners.insert(format!("{root}/{}", [a, b][winner].key));
        wins[winner] += 1;
        at = Some(ends[winner]);
    }
    eprintln!("wins (owner, zombie): {wins:?}");
    let files: std::collections::BTreeSet<String> =
        owner.data_files().await.unwrap().into_iter().collect();
    assert_eq!(files, winners, "the losers' files must not be in the table");
    let (_, metadata) = owner.load().await.unwrap().unwrap();
    assert_eq!(
        owner.transactions(&metadata).unwrap().get(app_id).copied(),
        at
    );
}
