//! `sluice bench load` end to end: usage errors, and a run against `sluice serve` on
//! a local directory store whose JSON and stored objects are checked.

use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

mod common;

/// `sluice serve` on a local directory.
fn serve(store: &std::path::Path) -> common::Gateway {
    common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
    ])
}

#[test]
fn bench_usage_errors_exit_with_2() {
    let url = "http://127.0.0.1:9/v1/objects";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bench", "load", url], "--users"),
        (vec!["bench", "load", url, "--rate", "10"], "--duration"),
        (
            vec!["bench", "load", url, "--users", "0"],
            "users must be 1",
        ),
        (
            vec!["bench", "load", url, "--users", "1", "--size", "2KiB..1KiB"],
            "size range",
        ),
        (
            vec!["bench", "load", url, "--users", "1", "--size", "2GiB"],
            "over the limit",
        ),
        (
            vec!["bench", "load", url, "--users", "1", "--rate", "5"],
            "cannot be used with",
        ),
        (
            vec![
                "bench",
                "load",
                url,
                "--rate",
                "5",
                "--duration",
                "1s",
                "--iterations",
                "2",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "bench",
                "load",
                "https://127.0.0.1/v1/objects",
                "--users",
                "1",
            ],
            "https",
        ),
        (
            vec![
                "bench",
                "load",
                "http://192.0.2.1/v1/objects",
                "--users",
                "1",
            ],
            "--allow-remote",
        ),
        (
            vec!["bench", "load", url, "--users", "1", "--api", "s3"],
            "invalid value",
        ),
    ];
    for (args, message) in cases {
        let out = sluice(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_load_against_a_local_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let gateway = serve(&store);
    let url = &gateway.url;
    let json = dir.path().join("run.json");
    let html = dir.path().join("run.html");
    let objects = format!("{url}/v1/objects");
    let out = sluice(&[
        "bench",
        "load",
        &objects,
        "--users",
        "25",
        "--iterations",
        "2",
        "--size",
        "3KiB",
        "--key-prefix",
        "load/test",
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("50 succeeded (100.00%), 0 failed"),
        "{stdout}"
    );
    assert!(stdout.contains("endings     201: 50"), "{stdout}");

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(summary["schema"], "sluice-bench/1");
    assert_eq!(summary["succeeded"], 50);
    assert_eq!(summary["endings"]["201"], 50);
    assert_eq!(summary["model"]["users"], 25);
    assert_eq!(summary["object_size"], 3072);
    assert!(summary["latency_s"]["p99"].as_f64().unwrap() > 0.0);
    let timeline = summary["timeline"].as_array().unwrap();
    let ended: u64 = timeline
        .iter()
        .map(|s| s["succeeded"].as_u64().unwrap())
        .sum();
    assert_eq!(ended, 50);

    // Every upload became an object of the right size under the prefix.
    let mut stored = Vec::new();
    for run in std::fs::read_dir(store.join("load/test")).unwrap() {
        for object in std::fs::read_dir(run.unwrap().path()).unwrap() {
            stored.push(object.unwrap().metadata().unwrap().len());
        }
    }
    assert_eq!(stored.len(), 50);
    assert!(stored.iter().all(|&len| len == 3072));

    check_html_in_chromium(&html, &dir.path().join("run.png"));
}

/// Opens the HTML report in headless Chromium (tests/clients/html_check.mjs, which
/// scripts/test.sh installs): no console errors, four charts with marks, a screenshot.
fn check_html_in_chromium(html: &std::path::Path, screenshot: &std::path::Path) {
    let page = std::fs::read_to_string(html).unwrap();
    assert_eq!(page.matches("<svg").count(), 4, "four charts");
    let Ok(clients) = std::env::var("SLUICE_TEST_CLIENTS") else {
        if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") {
            panic!(
                "the headless browser check needs SLUICE_TEST_CLIENTS (scripts/test.sh sets it)"
            );
        }
        eprintln!("SKIPPED the headless browser check (run scripts/test.sh)");
        return;
    };
    let out = Command::new("node")
        .arg(format!("{clients}/html_check.mjs"))
        .args([html, screenshot])
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["errors"],
        serde_json::json!([]),
        "console errors: {report}"
    );
    let charts = report["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 4, "{report}");
    for chart in charts {
        assert!(
            chart["marks"].as_u64().unwrap() >= 2,
            "an empty chart: {report}"
        );
        assert!(chart["width"].as_f64().unwrap() > 100.0, "{report}");
    }
    let shot = std::fs::metadata(screenshot).expect("a screenshot").len();
    assert!(shot > 10_000, "screenshot of {shot} bytes");
}

#[test]
fn strategies_table_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let json = dir.path().join("strategies.json");
    let out = sluice(&[
        "bench",
        "strategies",
        "--store",
        store.to_str().unwrap(),
        "--sizes",
        "100KiB,6MiB",
        "--part-size",
        "5MiB",
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "single PUT",
        "multipart, 1 at a time",
        "multipart, parallel",
        "100.00 KiB",
        "6.00 MiB",
    ] {
        assert!(stdout.contains(expected), "{expected} missing in\n{stdout}");
    }
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = results.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter().all(|r| r["seconds"].as_f64().is_some()),
        "{rows:?}"
    );
    // Every measured object was deleted.
    let left: Vec<_> = walk(&store);
    assert!(left.is_empty(), "{left:?}");

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["bench", "strategies", "--store", "s3://bucket/x"],
            "--allow-remote",
        ),
        (
            vec![
                "bench",
                "strategies",
                "--store",
                "s3://bucket/x",
                "--endpoint",
                "http://192.0.2.1:9000",
            ],
            "--allow-remote",
        ),
        (
            vec![
                "bench",
                "strategies",
                "--store",
                store.to_str().unwrap(),
                "--sizes",
                "2GiB",
            ],
            "1 GiB",
        ),
        (
            vec![
                "bench",
                "strategies",
                "--store",
                store.to_str().unwrap(),
                "--part-size",
                "1MiB",
            ],
            "part size",
        ),
    ];
    for (args, message) in cases {
        let out = sluice(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// Regular files under `dir` (the store's own `.sluice/` bookkeeping aside).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == ".sluice") {
            continue;
        }
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_load_straight_to_minio() {
    use sluice_store::ObjectStore;
    let Some(store) = sluice_testkit::minio::store("bench_s3").await else {
        return;
    };
    let endpoint = sluice_testkit::minio::endpoint("bench_s3").unwrap();
    let prefix = store.describe();
    let prefix = prefix
        .trim_start_matches(&format!("s3://{}/", sluice_testkit::minio::TEST_BUCKET))
        .trim_end_matches('/');
    // (api, users, iterations, size)
    let cases = [("s3-put", 5, 2, "10KiB"), ("s3-multipart", 2, 1, "6MiB")];
    for (api, users, iterations, size) in cases {
        let url = format!("s3://{}/{prefix}/{api}", sluice_testkit::minio::TEST_BUCKET);
        let out = tokio::task::spawn_blocking({
            let (url, endpoint) = (url.clone(), endpoint.clone());
            move || {
                sluice(&[
                    "bench",
                    "load",
                    &url,
                    "--api",
                    api,
                    "--endpoint",
                    &endpoint,
                    "--users",
                    &users.to_string(),
                    "--iterations",
                    &iterations.to_string(),
                    "--size",
                    size,
                ])
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{api}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let total = users * iterations;
        assert!(
            stdout.contains(&format!("{total} succeeded (100.00%)")),
            "{api}: {stdout}"
        );
        let listed = store
            .list_objects(&format!("{api}/"), None, 100)
            .await
            .unwrap();
        assert_eq!(listed.objects.len(), total, "{api}");
        let expected = sluice_upload::parse_size(size).unwrap();
        assert!(listed.objects.iter().all(|o| o.size == expected), "{api}");
    }
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}
