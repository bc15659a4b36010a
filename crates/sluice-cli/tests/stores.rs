//! The guarantees that rest on the store, on every store the suite starts
//! (MinIO, Azurite and fake-gcs-server; `common::stores`), with the built
//! binary and default settings:
//!
//! - the CLI's put, get, ls, sync and rm move files byte-exact both ways, and
//!   sync moves only what differs; cp and mv copy inside the store server-side;
//! - a Delta table that `sluice ingest` writes in three runs and `sluice
//!   tables compact` compacts is read back whole by two readers that are not
//!   sluice's (the deltalake package and DuckDB), which agree (on GCS by
//!   deltalake only: DuckDB needs GCS's XML API, which the emulator lacks);
//! - uploads through the fault proxy (`sluice chaos-proxy`'s faults: SlowDown,
//!   500s, connections reset either way) all land byte-exact, with clients
//!   that retry a 503 as they are told;
//! - a create-only race (`If-None-Match: *`, eight clients, one key, small and
//!   multipart; on GCS small only, the emulator ignoring compose's
//!   precondition) has exactly one winner, whose bytes are stored, and leaves
//!   no multipart upload behind;
//! - a PUT whose gateway exits right after its Nth store write (the intent,
//!   the completion, the event, the intent's removal, then the outbox's own
//!   writes; parts staged are not writes), for every N, each on a prefix of
//!   its own: after a gateway with the default settings has run, an object
//!   that exists has exactly one `upload.completed` event and an event names
//!   an object that exists, once `sluice janitor` has aborted what the dead
//!   gateways left open.
//!
//! The conformance suite (`sluice-store`'s tests) checks each operation; these
//! check what users rely on end to end.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::stores::{Backend, TestStore, BACKENDS};
use sluice_testkit::test_data;

const MIB: usize = 1024 * 1024;

fn run_ok(command: &mut std::process::Command, what: &str) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every file under `dir`, by relative path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_puts_gets_syncs_and_removes_on_every_store() {
    for backend in BACKENDS {
        let Some(store) = TestStore::open(backend, "stores-cli").await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // One small file and one of several parts, put and got back.
        for (name, size) in [("small.bin", 1000), ("large.bin", 20 * MIB + 7)] {
            let data = test_data(size, size as u64);
            let file = dir.path().join(name);
            std::fs::write(&file, &data).unwrap();
            let location = store.location(&format!("one/{name}"));
            run_ok(
                &mut store.sluice(&["put", file.to_str().unwrap(), &location]),
                &format!("{backend:?}: put {name}"),
            );
            let back = dir.path().join(format!("{name}.back"));
            run_ok(
                &mut store.sluice(&["get", &location, back.to_str().unwrap()]),
                &format!("{backend:?}: get {name}"),
            );
            assert!(
                std::fs::read(&back).unwrap() == data,
                "{backend:?}: {name} differs"
            );
        }
        // Copies inside the store, server-side: an object, a prefix, a move.
        let copied = run_ok(
            &mut store.sluice(&[
                "cp",
                &store.location("one/large.bin"),
                &store.location("copies/large.bin"),
            ]),
            &format!("{backend:?}: cp"),
        );
        assert!(copied.contains("server-side copy"), "{backend:?}: {copied}");
        run_ok(
            &mut store.sluice(&["cp", &store.location("one/"), &store.location("all/")]),
            &format!("{backend:?}: cp of a prefix"),
        );
        run_ok(
            &mut store.sluice(&[
                "mv",
                &store.location("copies/large.bin"),
                &store.location("moved/large.bin"),
            ]),
            &format!("{backend:?}: mv"),
        );
        let large = test_data(20 * MIB + 7, (20 * MIB + 7) as u64);
        let small = test_data(1000, 1000);
        for (key, data) in [
            ("moved/large.bin", &large),
            ("all/large.bin", &large),
            ("all/small.bin", &small),
        ] {
            let back = dir.path().join("copy.back");
            run_ok(
                &mut store.sluice(&["get", &store.location(key), back.to_str().unwrap()]),
                &format!("{backend:?}: get {key}"),
            );
            assert!(
                std::fs::read(&back).unwrap() == *data,
                "{backend:?}: {key} differs"
            );
        }
        assert!(
            store.store.head_object("copies/large.bin").await.is_err(),
            "{backend:?}: mv left its source"
        );
        // Into another bucket (container) of the same service, server-side too.
        let scheme = store.location("").split("://").next().unwrap().to_string();
        let other = format!(
            "{scheme}://sluice-other-{}",
            std::process::id() % 100_000 + 1_000_000 * (backend as u32)
        );
        run_ok(
            &mut store.sluice(&["mb", &other]),
            &format!("{backend:?}: mb"),
        );
        let across = run_ok(
            &mut store.sluice(&[
                "cp",
                &store.location("one/large.bin"),
                &format!("{other}/large.bin"),
            ]),
            &format!("{backend:?}: cp to another bucket"),
        );
        assert!(across.contains("server-side copy"), "{backend:?}: {across}");
        let back = dir.path().join("across.back");
        run_ok(
            &mut store.sluice(&["get", &format!("{other}/large.bin"), back.to_str().unwrap()]),
            &format!("{backend:?}: get from the other bucket"),
        );
        assert!(
            std::fs::read(&back).unwrap() == large,
            "{backend:?}: the copy in another bucket differs"
        );
        run_ok(
            &mut store.sluice(&["rm", &format!("{other}/")]),
            &format!("{backend:?}: rm in the other bucket"),
        );
        let listed = run_ok(
            &mut store.sluice(&["ls", &store.location("one/")]),
            &format!("{backend:?}: ls"),
        );
        assert!(
            listed.contains("small.bin") && listed.contains("large.bin"),
            "{backend:?}: {listed}"
        );
        // A tree up, two files changed, up again, and down into another directory.
        let up = dir.path().join("up");
        for i in 0..30 {
            let path = up.join(format!("d{}/f{i}.txt", i % 3));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, test_data(500 + i * 37, i as u64)).unwrap();
        }
        let remote = store.location("tree/");
        run_ok(
            &mut store.sluice(&["sync", up.to_str().unwrap(), &remote]),
            &format!("{backend:?}: first sync"),
        );
        std::fs::write(up.join("d0/f0.txt"), b"changed").unwrap();
        std::fs::write(up.join("d1/f1.txt"), b"changed too, longer").unwrap();
        let second = run_ok(
            &mut store.sluice(&["sync", up.to_str().unwrap(), &remote]),
            &format!("{backend:?}: second sync"),
        );
        assert!(
            second.contains("synced 2 files") && second.contains("28 unchanged"),
            "{backend:?}: the second sync said:\n{second}"
        );
        let down = dir.path().join("down");
        run_ok(
            &mut store.sluice(&["sync", &remote, down.to_str().unwrap()]),
            &format!("{backend:?}: sync down"),
        );
        assert!(tree(&up) == tree(&down), "{backend:?}: the trees differ");
        run_ok(
            &mut store.sluice(&["rm", &store.location("")]),
            &format!("{backend:?}: rm"),
        );
        let left = sluice_store::list_all(store.store.as_ref(), "")
            .await
            .unwrap();
        let left: Vec<&str> = left
            .iter()
            .map(|o| o.key.as_str())
            .filter(|k| !sluice_store::is_reserved_key(k))
            .collect();
        assert!(left.is_empty(), "{backend:?}: left after rm: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_table_on_every_store_is_read_back_by_other_readers() {
    let Some((clients, python)) = common::python_readers("stores-delta") else {
        return;
    };
    for backend in BACKENDS {
        let Some(store) = TestStore::open(backend, "stores-delta").await else {
            return;
        };
        let location = store.location("");
        for run in 0..3u64 {
            let records: String = (run * 100..run * 100 + 100)
                .map(|id| format!("{{\"id\":{id},\"name\":\"row {id}\"}}\n"))
                .collect();
            let mut ingest = store.sluice(&["ingest", "--stream", "t", "--table", "delta"]);
            ingest.args(["--json", "--flush-records", "40", "--store", &location]);
            let output = common::tables::fed(&mut ingest, records.as_bytes());
            assert!(
                output.status.success(),
                "{backend:?}: ingest {run}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let compacted = run_ok(
            &mut store.sluice(&[
                "tables",
                "compact",
                "t",
                "--store",
                &location,
                "--min-files",
                "2",
            ]),
            &format!("{backend:?}: compact"),
        );
        assert!(
            compacted.contains("rewritten as 1"),
            "{backend:?}: {compacted}"
        );
        let (_, env) = store.reach();
        let mut read = std::process::Command::new(&python);
        read.arg(format!("{clients}/delta_read.py"))
            .args([&store.location("t"), "id"])
            .envs(env);
        if backend == Backend::Minio {
            read.env("AWS_ENDPOINT_URL", store.endpoint());
        }
        let read: serde_json::Value =
            serde_json::from_str(&run_ok(&mut read, &format!("{backend:?}: delta_read.py")))
                .unwrap();
        // DuckDB reads gs:// only through GCS's XML API, which the emulator
        // does not serve (delta_read.py says so in its answer).
        let readers: &[&str] = match backend {
            Backend::FakeGcs => &["deltalake"],
            _ => &["deltalake", "duckdb"],
        };
        for &reader in readers {
            assert_eq!(read[reader]["rows"], 300, "{backend:?} {reader}: {read}");
            assert_eq!(
                read[reader]["distinct"], 300,
                "{backend:?} {reader}: {read}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_through_store_faults_land_byte_exact_on_every_store() {
    use sluice_chaos::{ChaosConfig, ChaosProxy, FaultRates};
    for backend in BACKENDS {
        let Some(store) = TestStore::open(backend, "stores-faults").await else {
            return;
        };
        let faults = FaultRates {
            slowdown: 0.10,
            internal_error: 0.02,
            reset_request: 0.02,
            reset_response: 0.02,
            stall: 0.0,
        };
        let (origin, _) = store.origin_and_path();
        let proxy = ChaosProxy::start(
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            &origin,
            ChaosConfig {
                faults,
                ..ChaosConfig::default()
            },
        )
        .await
        .unwrap();
        let gateway = store.through(&proxy.url()).serve("127.0.0.1:0", &[]);
        let client = reqwest::Client::new();
        let mut failures = Vec::new();
        for i in 0..60u64 {
            let size = if i % 5 == 4 {
                20 * MIB + i as usize
            } else {
                1000 + 997 * i as usize
            };
            let body = Bytes::from(test_data(size, 300 + i));
            let key = format!("faults/{i}");
            let url = format!("{}/v1/objects/{key}", gateway.url);
            // As a client told to come back: a 503 is tried again a second later.
            let mut status = 0;
            for _ in 0..6 {
                status = match client.put(&url).body(body.clone()).send().await {
                    Ok(answer) => answer.status().as_u16(),
                    Err(_) => 0,
                };
                if status != 503 {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if status != 201 {
                failures.push(format!("{key}: {status}"));
                continue;
            }
            if common::object_bytes(store.store.as_ref(), &key).await != body.as_ref() {
                failures.push(format!("{key}: differs"));
            }
        }
        let injected = proxy.stats();
        assert!(
            failures.is_empty(),
            "{backend:?}: {failures:?} ({injected:?})"
        );
        let open = store.store.list_multipart_uploads("faults/").await.unwrap();
        assert!(open.is_empty(), "{backend:?}: {open:?}");
        eprintln!("{backend:?}: 60 uploads through the fault proxy, {injected:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_only_race_has_one_winner_on_every_store() {
    for backend in BACKENDS {
        let Some(store) = TestStore::open(backend, "stores-race").await else {
            return;
        };
        let gateway = store.serve("127.0.0.1:0", &[]);
        let client = reqwest::Client::new();
        let mut cases = vec![("small", 2000), ("multipart", 12 * MIB)];
        if backend == Backend::FakeGcs {
            // A multipart upload ends in a compose with ifGenerationMatch=0,
            // which GCS enforces and fake-gcs-server ignores: racing
            // completions cannot be kept apart there. (A loser that comes
            // after the winner is refused on it too: the conformance suite's
            // multipart_completion_if_none_match.)
            eprintln!("FakeGcs: the multipart race needs GCS itself (the emulator ignores compose's precondition)");
            cases.truncate(1);
        }
        for (case, size) in cases {
            let key = format!("race/{case}");
            let racers: Vec<_> = (0..8u64)
                .map(|n| {
                    let (client, url) =
                        (client.clone(), format!("{}/v1/objects/{key}", gateway.url));
                    let body = Bytes::from(test_data(size, 100 + n));
                    tokio::spawn(async move {
                        let status = client
                            .put(url)
                            .header("if-none-match", "*")
                            .body(body.clone())
                            .send()
                            .await
                            .unwrap()
                            .status()
                            .as_u16();
                        (status, body)
                    })
                })
                .collect();
            let mut answers = Vec::new();
            for racer in racers {
                answers.push(racer.await.unwrap());
            }
            let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
            let winners: Vec<&Bytes> = answers
                .iter()
                .filter(|(s, _)| (200..300).contains(s))
                .map(|(_, b)| b)
                .collect();
            assert_eq!(winners.len(), 1, "{backend:?} {case}: {statuses:?}");
            assert!(
                statuses.iter().all(|s| (200..300).contains(s) || *s == 412),
                "{backend:?} {case}: {statuses:?}"
            );
            let stored = common::object_bytes(store.store.as_ref(), &key).await;
            assert!(
                stored == winners[0].as_ref(),
                "{backend:?} {case}: the stored object is not the winner's"
            );
        }
        let open = store.store.list_multipart_uploads("").await.unwrap();
        assert!(open.is_empty(), "{backend:?}: {open:?}");
    }
}

/// How many store writes the walk covers (puts, completions, deletes: what
/// `SLUICE_FAULT_EXIT_AFTER_STORE_WRITES` counts): past the last write of a
/// multipart PUT with its event (intent, completion, outbox entry, intent
/// removal), where the gateway no longer exits before answering.
const WRITES: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_killed_after_each_store_write_has_one_event_on_every_store() {
    for backend in BACKENDS.into_iter().rev() {
        killed_after_each_write(backend).await;
    }
}

async fn killed_after_each_write(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, b"the kill walk's events secret, 32 bytes or more").unwrap();
    // Events go nowhere, so they stay in the outbox to be counted.
    let events = [
        "--event-url",
        "http://127.0.0.1:9/events",
        "--event-secret-file",
        secret.to_str().unwrap(),
    ];
    // Over the 16 MiB threshold: a multipart upload (on Azure, staged blocks).
    let data = Bytes::from(test_data(20 * MIB + 5, 51));
    let client = reqwest::Client::new();
    // Side by side: one gateway per N, each exiting after its Nth write, each
    // on a prefix of its own. On a shared prefix a gateway's delivery worker
    // also retries the events the other walks wrote, and those writes count:
    // its Nth write was then no longer its PUT's (CI saw walk 8 exit before
    // answering).
    let mut walk = Vec::new();
    for n in 1..=WRITES {
        let Some(store) = TestStore::open(backend, &format!("stores-kill-walk-{n}")).await else {
            return;
        };
        let n_text = n.to_string();
        let gateway = store.serve_with_env(
            "127.0.0.1:0",
            &events,
            &[("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES", n_text.as_str())],
        );
        let put = client
            .put(format!("{}/v1/objects/walk", gateway.url))
            .body(data.clone())
            .send();
        walk.push((n, store, gateway, tokio::spawn(put)));
    }
    let mut answered = BTreeMap::new();
    let mut stores = Vec::new();
    for (n, store, gateway, put) in walk {
        let status = put.await.unwrap().map(|r| r.status().as_u16()).ok();
        answered.insert(n, status);
        drop(gateway);
        stores.push((n, store));
    }
    // The last walk's PUT was answered before its gateway's fault: the walk
    // covered every write the PUT makes.
    assert!(
        answered[&WRITES].is_some_and(|s| (200..300).contains(&s)),
        "{backend:?}: {answered:?}"
    );
    // `sluice janitor` aborts what the dead gateways left open, and a gateway
    // with the default settings settles their intents (older than 30 s): an
    // object made becomes its event, an upload gone without one is dropped.
    let mut settlers = Vec::new();
    for (n, store) in &stores {
        let (flags, env) = store.reach();
        let location = store.location("");
        run_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["janitor", "--store", &location, "--older-than", "0s"])
                .args(&flags)
                .envs(env),
            &format!("{backend:?} walk {n}: janitor"),
        );
        let open = store.store.list_multipart_uploads("").await.unwrap();
        assert!(open.is_empty(), "{backend:?} walk {n}: {open:?}");
        settlers.push(store.serve("127.0.0.1:0", &events));
    }
    // Until every object has its event (an intent whose object was never
    // made, written before its multipart upload was, waits out its 15
    // minutes: it is not waited for here).
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut made = 0;
    for (n, store) in &stores {
        let (made_here, events) = loop {
            let events = common::outbox_events(store.store.as_ref()).await;
            let made_here = match store.store.head_object("walk").await {
                Ok(_) => true,
                Err(error) if error.is_not_found() => false,
                Err(error) => panic!("{backend:?} walk {n}: {error}"),
            };
            let settled = !made_here || events.get("walk").is_some_and(|(_, count)| *count == 1);
            if settled {
                break (made_here, events);
            }
            assert!(
                Instant::now() < deadline,
                "{backend:?} walk {n}: events {events:#?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        if made_here {
            made += 1;
            assert!(
                common::object_bytes(store.store.as_ref(), "walk").await == data.as_ref(),
                "{backend:?} walk {n}: the object differs"
            );
        }
        // An event names an object that exists.
        assert!(
            made_here || events.is_empty(),
            "{backend:?} walk {n}: events {events:#?} without an object"
        );
        // A 2xx names an object that exists.
        let status = answered[n];
        assert!(
            made_here || !status.is_some_and(|s| (200..300).contains(&s)),
            "{backend:?} walk {n}: answered {status:?} without an object"
        );
    }
    drop(settlers);
    eprintln!(
        "{backend:?}: {made} of {WRITES} walks made an object, each with one event; answers {answered:?}"
    );
}
