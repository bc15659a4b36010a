//! Delta commits against a real MinIO (its conditional writes decide who has
//! each version): writers that own the same Kafka partition at once (a
//! revoked member still running) race for the same transaction, and exactly
//! one wins each round while the other is fenced and its file never joins;
//! writers with transactions of their own (two gateways on one table) both
//! get in, the loser of a version taking the next.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{file, layout, schema, table_files};
use sluice_store::ObjectStore;
use sluice_streams::table::delta::{Committed, DeltaTable, TableError, Transaction};

#[tokio::test]
async fn owners_of_one_partition_race_and_exactly_one_commit_wins_each_round() {
    let Some(store) = sluice_testkit::minio::store("delta-zombies").await else {
        return;
    };
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let owner = DeltaTable::new(store.clone(), layout());
    let zombie = DeltaTable::new(store.clone(), layout());
    let app_id = "sluice-group-topic-0";
    let mut at: Option<i64> = None;
    let mut winners = BTreeSet::new();
    let mut wins = [0, 0];
    for round in 0..24 {
        // Both have read the table as it is now.
        owner.snapshot().await.unwrap();
        zombie.snapshot().await.unwrap();
        // The two read the same messages; on odd rounds the zombie's batch
        // ended earlier (its own flush).
        let ends = [
            at.unwrap_or(0) + 1000,
            at.unwrap_or(0) + 1000 - 100 * (round % 2),
        ];
        let transactions = ends.map(|version| Transaction {
            app_id: app_id.into(),
            after: at,
            version,
        });
        let (a, b) = (
            file(&format!("{round}-owner")),
            file(&format!("{round}-zombie")),
        );
        let schema = schema();
        let (by_owner, by_zombie) = tokio::join!(
            owner.commit(std::slice::from_ref(&a), &transactions[..1], &schema),
            zombie.commit(std::slice::from_ref(&b), &transactions[1..], &schema),
        );
        // The loser is fenced, or finds the same offsets committed (the
        // records are in, through the winner's file; its own file is not).
        let lost = |r: &Result<Committed, TableError>| {
            matches!(r, Err(TableError::Fenced { .. }) | Ok(Committed::Already))
        };
        let winner = match (&by_owner, &by_zombie) {
            (Ok(Committed::Version(_)), theirs) if lost(theirs) => 0,
            (ours, Ok(Committed::Version(_))) if lost(ours) => 1,
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        };
        winners.insert([a, b][winner].key.clone());
        wins[winner] += 1;
        at = Some(ends[winner]);
    }
    eprintln!("wins (owner, zombie): {wins:?}");
    let (files, snapshot) = table_files(store).await;
    assert_eq!(files, winners, "the losers' files must not be in the table");
    assert_eq!(snapshot.txns.get(app_id).copied(), at);
    assert_eq!(snapshot.version, Some(23));
}

#[tokio::test]
async fn writers_with_transactions_of_their_own_both_get_in() {
    let Some(store) = sluice_testkit::minio::store("delta-two-writers").await else {
        return;
    };
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let writers = [
        DeltaTable::new(store.clone(), layout()),
        DeltaTable::new(store.clone(), layout()),
    ];
    let mut expected = BTreeSet::new();
    for round in 0..10i64 {
        let commits = writers.iter().enumerate().map(|(i, writer)| {
            let file = file(&format!("{round}-{i}"));
            expected.insert(file.key.clone());
            let transaction = Transaction {
                app_id: format!("sluice-gateway-{i}"),
                after: (round > 0).then_some(round),
                version: round + 1,
            };
            async move { writer.commit(&[file], &[transaction], &schema()).await }
        });
        for committed in futures::future::join_all(commits).await {
            assert!(
                matches!(committed, Ok(Committed::Version(_))),
                "{committed:?}"
            );
        }
    }
    let (files, snapshot) = table_files(store).await;
    assert_eq!(files, expected);
    assert_eq!(snapshot.version, Some(19));
}

#[tokio::test]
async fn every_hundredth_version_is_checkpointed_and_a_new_reader_starts_there() {
    let Some(store) = sluice_testkit::minio::store("delta-checkpoints").await else {
        return;
    };
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    let writer = Arc::new(DeltaTable::new(store.clone(), layout()));
    for version in 0..=100i64 {
        let transaction = Transaction {
            app_id: "sluice-writer".into(),
            after: (version > 0).then_some(version),
            version: version + 1,
        };
        let committed = writer
            .commit(&[file(&version.to_string())], &[transaction], &schema())
            .await
            .unwrap();
        if let Committed::Version(v) = committed {
            writer.after_commit(v);
        }
    }
    // The checkpoint is written off the commit's way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store
        .head_object("events/_delta_log/_last_checkpoint")
        .await
        .is_err()
    {
        assert!(std::time::Instant::now() < deadline, "no checkpoint");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // With the commits before it gone, a new reader still sees everything.
    for version in 0..100u64 {
        store
            .delete_object(&format!("events/_delta_log/{version:020}.json"))
            .await
            .unwrap();
    }
    let (files, snapshot) = table_files(store).await;
    assert_eq!(snapshot.version, Some(100));
    assert_eq!(files.len(), 101);
    assert_eq!(snapshot.txns.get("sluice-writer").copied(), Some(101));
}

/// Issue 48: a table whose owner set `delta.checkpointInterval = 5` got no
/// checkpoint at version 5 (sluice used a fixed 100). The table's property
/// decides, whoever wrote it.
#[tokio::test]
async fn the_table_s_checkpoint_interval_is_honoured() {
    // Version 0, as another writer made it: its properties.
    let (memory, store) =
        another_writers_table(serde_json::json!({"delta.checkpointInterval": "5"})).await;
    let writer = Arc::new(DeltaTable::new(store.clone(), layout()));
    for n in 1..=7i64 {
        let transaction = Transaction {
            app_id: "sluice-writer".into(),
            after: (n > 1).then_some(n - 1),
            version: n,
        };
        let committed = writer
            .commit(&[file(&n.to_string())], &[transaction], &schema())
            .await
            .unwrap();
        if let Committed::Version(v) = committed {
            writer.after_commit(v);
        }
    }
    // Written off the commit's way, at the version the table is at by then
    // (5 or later); with the default interval there would be none before 100.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let last = loop {
        if let Some(last) = memory.object("events/_delta_log/_last_checkpoint") {
            break serde_json::from_slice::<serde_json::Value>(&last).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let at = last["version"].as_u64().unwrap();
    assert!((5..=7).contains(&at), "{last}");
    let (files, snapshot) = table_files(store).await;
    assert_eq!((files.len(), snapshot.version), (7, Some(7)));
}

/// Issue 48: vacuum deleted every unreferenced object under the table's
/// root, so anything else kept there (a dead letter, someone's notes) went
/// too. It deletes only data files (Parquet) that no version reads.
#[tokio::test]
async fn vacuum_deletes_only_data_files_no_version_reads() {
    let memory = sluice_testkit::MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    let table = DeltaTable::new(store.clone(), layout());
    table.commit(&[file("in")], &[], &schema()).await.unwrap();
    for key in [
        "events/in.parquet",
        "events/orphan.parquet",
        "events/dead/0001.ndjson.zst",
        "events/README.txt",
    ] {
        store
            .put_object(sluice_store::PutRequest::new(key, b"x".to_vec()))
            .await
            .unwrap();
    }
    let report = table
        .vacuum(std::time::Duration::ZERO, false)
        .await
        .unwrap();
    assert_eq!(report.deleted, ["events/orphan.parquet"]);
    for kept in [
        "events/in.parquet",
        "events/dead/0001.ndjson.zst",
        "events/README.txt",
    ] {
        assert!(memory.object(kept).is_some(), "{kept} was deleted");
    }
}

/// Commit `n` of writer `sluice-writer` (transaction-only), 10 s after the
/// last on `memory`'s clock; at every 100th, what the writer of a
/// checkpoint's version does: a checkpoint and the log's clean-up. Whether
/// it did that.
async fn one_commit_10_s_on(
    writer: &DeltaTable,
    memory: &sluice_testkit::MemoryStore,
    n: i64,
) -> bool {
    memory.advance_clock(std::time::Duration::from_secs(10));
    let transaction = Transaction {
        app_id: "sluice-writer".into(),
        after: (n > 1).then_some(n - 1),
        version: n,
    };
    writer.commit(&[], &[transaction], &schema()).await.unwrap();
    if n % 100 != 0 {
        return false;
    }
    writer.checkpoint().await.unwrap();
    writer.clean_log(memory.now()).await.unwrap();
    true
}

/// Issue 48: the log only grew (at one commit a second, about 86,000 objects
/// a day). A simulated week of one-second commits (60,480 versions) on a
/// table that keeps its log an hour (`delta.logRetentionDuration`): each
/// checkpoint is followed by the clean-up of what is older than the retention
/// and before the newest checkpoint it keeps, so the log stays bounded; a new
/// reader still starts from a checkpoint and sees every version.
#[tokio::test]
async fn a_week_of_commits_keeps_the_log_bounded_by_its_retention() {
    const VERSIONS: i64 = 7 * 24 * 3600 / 10; // one commit every 10 s, a week
    let (memory, store) =
        another_writers_table(serde_json::json!({"delta.logRetentionDuration": "interval 1 hour"}))
            .await;
    let writer = DeltaTable::new(store.clone(), layout());
    // A writer that read the table at its start and then waited the week.
    let idle = DeltaTable::new(store.clone(), layout());
    idle.snapshot().await.unwrap();
    let (mut most, mut least_after_an_hour) = (0, usize::MAX);
    for n in 1..=VERSIONS {
        if one_commit_10_s_on(&writer, &memory, n).await {
            let log = memory
                .list_objects("events/_delta_log/", None, 100_000)
                .await
                .unwrap();
            let commits = log
                .objects
                .iter()
                .filter(|o| o.key.ends_with(".json"))
                .count();
            most = most.max(log.objects.len());
            if n > 400 {
                least_after_an_hour = least_after_an_hour.min(commits);
            }
        }
    }
    // An hour is 360 versions here: the log holds the last hour (and what
    // leads up to it from the checkpoint before), and not much more.
    assert!(most <= 480, "the log grew to {most} objects");
    assert!(
        least_after_an_hour >= 360,
        "only {least_after_an_hour} commits were kept"
    );
    // The idle writer's commits were cleaned up behind a checkpoint: it
    // reads again from there, and commits after the week's last version.
    let idle_commit = Transaction {
        app_id: "sluice-idle".into(),
        after: None,
        version: 1,
    };
    let committed = idle.commit(&[], &[idle_commit], &schema()).await.unwrap();
    assert_eq!(committed, Committed::Version(VERSIONS as u64 + 1));
    let (_, snapshot) = table_files(store).await;
    assert_eq!(snapshot.version, Some(VERSIONS as u64 + 1));
    assert_eq!(snapshot.txns.get("sluice-writer").copied(), Some(VERSIONS));
}

/// Issue 48: vacuum knew only its own 1-hour minimum, not the table's
/// `delta.deletedFileRetentionDuration`: a shorter retention is refused,
/// naming the property; one at least as long vacuums.
#[tokio::test]
async fn vacuum_keeps_the_table_s_deleted_file_retention() {
    let (_, store) = another_writers_table(
        serde_json::json!({"delta.deletedFileRetentionDuration": "interval 2 days"}),
    )
    .await;
    let table = DeltaTable::new(store, layout());
    let day = std::time::Duration::from_secs(86_400);
    let refused = table.vacuum(day, true).await.unwrap_err().to_string();
    assert!(
        refused.contains("delta.deletedFileRetentionDuration"),
        "{refused}"
    );
    table.vacuum(2 * day, true).await.unwrap();
}

/// Found in review: a reader's listing went on after the last key it saw,
/// `_last_checkpoint` included, and every commit sorts before `_`: once a
/// table had a checkpoint, a writer never saw another writer's commits
/// again (its next commit met the version taken and gave up: "the version
/// exists but the log does not list or read it"). Spark checkpoints every 10
/// versions, so a table shared with Spark met this at once.
#[tokio::test]
async fn a_writer_sees_other_writers_commits_after_a_checkpoint() {
    let memory = sluice_testkit::MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    let ours = DeltaTable::new(store.clone(), layout());
    let theirs = DeltaTable::new(store.clone(), layout());
    ours.commit(&[file("a")], &[], &schema()).await.unwrap();
    ours.checkpoint().await.unwrap();
    ours.snapshot().await.unwrap();
    theirs.commit(&[file("b")], &[], &schema()).await.unwrap();
    let committed = ours.commit(&[file("c")], &[], &schema()).await.unwrap();
    assert_eq!(committed, Committed::Version(2));
    let (files, _) = table_files(store).await;
    assert_eq!(files.len(), 3, "{files:?}");
}

/// Review finding: the log's clean-up took the newest checkpoint older than
/// the retention as where readers start, a multi-part one another engine
/// left incomplete included, and removed what the last whole checkpoint
/// needed. Only whole checkpoints count.
#[tokio::test]
async fn the_log_is_cleaned_up_behind_whole_checkpoints_only() {
    let memory = sluice_testkit::MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    let table = DeltaTable::new(store.clone(), layout());
    for name in ["a", "b"] {
        table.commit(&[file(name)], &[], &schema()).await.unwrap();
    }
    table.checkpoint().await.unwrap(); // at version 1
    for name in ["c", "d"] {
        table.commit(&[file(name)], &[], &schema()).await.unwrap();
    }
    // Part 1 of 2 of a checkpoint at version 3, the second never written.
    store
        .put_object(sluice_store::PutRequest::new(
            "events/_delta_log/00000000000000000003.checkpoint.0000000001.0000000002.parquet",
            b"PAR1".to_vec(),
        ))
        .await
        .unwrap();
    memory.advance_clock(std::time::Duration::from_secs(31 * 86_400));
    let cleaned = table.clean_log(memory.now()).await.unwrap();
    assert_eq!(
        (cleaned.kept_from, cleaned.deleted),
        (Some(1), 1),
        "{cleaned:?}"
    );
    let (files, snapshot) = table_files(store).await;
    assert_eq!((files.len(), snapshot.version), (4, Some(3)));
}

/// Version 0 of the table as another writer made it: its protocol, the
/// test schema and `configuration` as its properties.
async fn created_by_another_writer(store: &dyn ObjectStore, configuration: serde_json::Value) {
    created_with(
        store,
        serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 2}),
        configuration,
    )
    .await
}

/// A memory store holding version 0 of a table another writer made with
/// `configuration`: the store, and it as an object store.
async fn another_writers_table(
    configuration: serde_json::Value,
) -> (sluice_testkit::MemoryStore, Arc<dyn ObjectStore>) {
    let memory = sluice_testkit::MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    created_by_another_writer(store.as_ref(), configuration).await;
    (memory, store)
}

/// [`created_by_another_writer`], under `protocol`.
async fn created_with(
    store: &dyn ObjectStore,
    protocol: serde_json::Value,
    configuration: serde_json::Value,
) {
    let created = [
        serde_json::json!({ "protocol": protocol }),
        serde_json::json!({"metaData": {
            "id": "d6a1e4b0-5a4c-4c5e-9c4e-2f1d7e3b9a01",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema().to_string(),
            "partitionColumns": [],
            "createdTime": 0,
            "configuration": configuration,
        }}),
    ];
    let body: String = created.iter().map(|a| format!("{a}\n")).collect();
    store
        .put_object(sluice_store::PutRequest::new(
            "events/_delta_log/00000000000000000000.json",
            body.into_bytes(),
        ))
        .await
        .unwrap();
}

/// Issue 48: checkpoints were built whole, through the whole table's JSON.
/// A table past a checkpoint's part size is checkpointed in parts (classic)
/// or sidecars (V2, in a table with feature `v2Checkpoint` whose policy is
/// `v2`), each built and stored in turn, and a reader starting from the
/// checkpoint sees every file, and the commits after it. The log's clean-up
/// takes an older checkpoint's parts, or its sidecars, with it.
#[tokio::test]
async fn a_large_table_is_checkpointed_in_parts() {
    let v2 = serde_json::json!({
        "minReaderVersion": 3, "minWriterVersion": 7,
        "readerFeatures": ["v2Checkpoint"], "writerFeatures": ["v2Checkpoint"],
    });
    let cases = [
        (
            "classic",
            serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 2}),
            serde_json::json!({}),
        ),
        (
            "V2",
            v2,
            serde_json::json!({"delta.checkpointPolicy": "v2"}),
        ),
    ];
    for (case, protocol, configuration) in cases {
        let memory = sluice_testkit::MemoryStore::new();
        let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
        created_with(store.as_ref(), protocol, configuration).await;
        let writer = DeltaTable::new(store.clone(), layout());
        for n in 0..25 {
            writer
                .commit(&[file(&format!("f{n}"))], &[], &schema())
                .await
                .unwrap();
        }
        // 25 files and the protocol and metadata: parts of 10 actions.
        let at = writer.checkpoint_in_parts_of(10).await.unwrap();
        assert_eq!(at, 25, "{case}");
        writer
            .commit(&[file("after")], &[], &schema())
            .await
            .unwrap();
        let log = memory.keys_under("events/_delta_log/");
        let last: serde_json::Value =
            serde_json::from_slice(&memory.object("events/_delta_log/_last_checkpoint").unwrap())
                .unwrap();
        match case {
            "classic" => {
                let parts: Vec<&String> =
                    log.iter().filter(|k| k.contains(".checkpoint.")).collect();
                assert_eq!(parts.len(), 3, "{case}: {parts:?}");
                assert_eq!(last["parts"], 3, "{case}: {last}");
            }
            _ => {
                let sidecars = log.iter().filter(|k| k.contains("/_sidecars/")).count();
                assert_eq!(sidecars, 3, "{case}: {log:?}");
                let top = last["v2Checkpoint"]["path"].as_str().unwrap();
                assert!(top.ends_with(".json"), "{case}: {last}");
            }
        }
        let (files, snapshot) = table_files(store.clone()).await;
        assert_eq!(files.len(), 26, "{case}");
        assert_eq!(snapshot.version, Some(26), "{case}");
        // A newer checkpoint, and a month on: the log is cleaned up to it,
        // and the older checkpoint's parts or sidecars go with it (the newer
        // one's stay).
        writer.checkpoint_in_parts_of(10).await.unwrap();
        memory.advance_clock(std::time::Duration::from_secs(31 * 86_400));
        let cleaned = writer.clean_log(memory.now()).await.unwrap();
        assert_eq!(cleaned.kept_from, Some(26), "{case}: {cleaned:?}");
        let log = memory.keys_under("events/_delta_log/");
        let checkpoint_files: Vec<&String> =
            log.iter().filter(|k| k.contains(".checkpoint.")).collect();
        let expected = match case {
            "classic" => 3,
            _ => 4, // three sidecars and the top file
        };
        assert_eq!(checkpoint_files.len(), expected, "{case}: {log:?}");
        assert!(
            checkpoint_files
                .iter()
                .all(|k| k.contains("/00000000000000000026.")
                    || k.contains("_sidecars/00000000000000000026.")),
            "{case}: {log:?}"
        );
        let (files, snapshot) = table_files(store).await;
        assert_eq!(files.len(), 26, "{case}");
        assert_eq!(snapshot.version, Some(26), "{case}");
    }
}

/// Issue 48: checkpoints carried every tombstone for good. They keep those
/// within the table's `delta.deletedFileRetentionDuration` (a week without
/// it), and drop older ones, as Delta has it.
#[tokio::test]
async fn checkpoints_keep_tombstones_for_the_deleted_file_retention() {
    let (_, store) = another_writers_table(
        serde_json::json!({"delta.deletedFileRetentionDuration": "interval 2 days"}),
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let day = 24 * 3600 * 1000;
    // Another engine removed two files: three days ago, and one day ago.
    let removes: String = [("old", now - 3 * day), ("recent", now - day)]
        .iter()
        .map(|(name, at)| {
            format!(
                "{}\n",
                serde_json::json!({"remove": {"path": format!("{name}.parquet"),
                    "deletionTimestamp": at, "dataChange": true}})
            )
        })
        .collect();
    store
        .put_object(sluice_store::PutRequest::new(
            "events/_delta_log/00000000000000000001.json",
            removes.into_bytes(),
        ))
        .await
        .unwrap();
    let writer = DeltaTable::new(store.clone(), layout());
    writer.checkpoint().await.unwrap();
    let (_, snapshot) = table_files(store).await;
    let kept: Vec<&String> = snapshot
        .tombstones
        .as_ref()
        .unwrap()
        .values()
        .map(|r| &r.path)
        .collect();
    assert_eq!(kept, ["recent.parquet"]);
}

/// Issue 48 (feature `checkpointProtection`): the log before
/// `delta.requireCheckpointProtectionBeforeVersion` is another engine's to
/// clean up; sluice's clean-up removes only what is after it.
#[tokio::test]
async fn the_log_before_a_protected_version_stays() {
    let memory = sluice_testkit::MemoryStore::new();
    let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
    created_with(
        store.as_ref(),
        serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 7,
            "writerFeatures": ["checkpointProtection"]}),
        serde_json::json!({"delta.logRetentionDuration": "interval 1 hour",
            "delta.requireCheckpointProtectionBeforeVersion": "300"}),
    )
    .await;
    let writer = DeltaTable::new(store.clone(), layout());
    for n in 1..=1000i64 {
        one_commit_10_s_on(&writer, &memory, n).await;
    }
    let commits: Vec<u64> = memory
        .keys_under("events/_delta_log/")
        .iter()
        .filter_map(|k| {
            k.strip_prefix("events/_delta_log/")?
                .strip_suffix(".json")?
                .parse()
                .ok()
        })
        .collect();
    let protected = commits.iter().filter(|v| **v < 300).count();
    assert_eq!(protected, 300, "a protected commit was removed");
    assert!(
        commits.len() < 1001,
        "nothing after the protected version was cleaned up"
    );
    let (_, snapshot) = table_files(store).await;
    assert_eq!(snapshot.version, Some(1000));
}

/// A commit is read a line at a time as its body arrives (a large one was
/// read whole, then parsed: twice its size in memory). A commit of 3,000
/// files in a directory store comes in 256 KiB pieces, lines cut across
/// them: every file is read.
#[tokio::test]
async fn a_commit_is_read_across_the_pieces_its_body_comes_in() {
    let root = std::env::temp_dir().join(format!(
        "sluice-delta-pieces-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let fs = sluice_store::fs::FsStore::open(sluice_store::fs::FsConfig::new(&root)).unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(fs);
    created_with(
        store.as_ref(),
        serde_json::json!({"minReaderVersion": 1, "minWriterVersion": 2}),
        serde_json::json!({}),
    )
    .await;
    let adds: String = (0..3000)
        .map(|n| {
            format!(
                "{}\n",
                serde_json::json!({"add": {"path": format!("f{n:05}.parquet"),
                    "partitionValues": {}, "size": 100, "modificationTime": 0,
                    "dataChange": true,
                    "stats": "{\"numRecords\":10,\"minValues\":{\"id\":1},\"maxValues\":{\"id\":9}}"}})
            )
        })
        .collect();
    assert!(adds.len() > 2 * 256 * 1024, "{}", adds.len());
    store
        .put_object(sluice_store::PutRequest::new(
            "events/_delta_log/00000000000000000001.json",
            adds.into_bytes(),
        ))
        .await
        .unwrap();
    let (files, snapshot) = table_files(store).await;
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!((files.len(), snapshot.version), (3000, Some(1)));
}
