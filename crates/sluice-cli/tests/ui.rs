//! The gateway's own pages in headless Chromium (issue 15), driven by
//! tests/clients/ui_check.mjs: a file dropped on the upload page with a token
//! from the embedding application is stored and read back (through the
//! gateway with tus, and straight to the bucket with Uppy 6's aws-s3 on a
//! session, issue 50), and the dashboard's
//! charts move while `sluice bench load` runs. Neither page may log a console
//! error. With SLUICE_UI_SCREENSHOTS=DIR the screenshots are kept there (that
//! is how docs/ui-*.png are made).

use std::process::{Command, Stdio};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

mod common;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";

fn screenshot(dir: &tempfile::TempDir, name: &str) -> String {
    match std::env::var("SLUICE_UI_SCREENSHOTS") {
        Ok(keep) if !keep.is_empty() => format!("{keep}/{name}"),
        _ => dir.path().join(name).to_str().unwrap().to_string(),
    }
}

fn check(dir: &str, args: &[&str]) -> Value {
    let output = Command::new("node")
        .arg(format!("{dir}/ui_check.mjs"))
        .args(args)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ui_check.mjs {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("not JSON: {stdout}"))
}

#[test]
fn the_upload_page_stores_a_dropped_file_with_the_applications_token() {
    let Some(clients) = common::npm_clients("upload_page") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let secret = work.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let store = work.path().join("store");
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--jwt-secret-file",
        secret.to_str().unwrap(),
    ]);
    let token = common::hs256_token(SECRET, json!({ "sub": "acme" }));
    let size = 3 * 1024 * 1024 + 17;
    let report = check(
        &clients,
        &[
            "upload",
            &format!("{}/#token={token}", gateway.url),
            &size.to_string(),
            &screenshot(&work, "ui-upload.png"),
        ],
    );
    assert_eq!(report["errors"], json!([]), "{report}");
    let key = report["key"].as_str().unwrap();
    assert!(
        key.starts_with("acme/") && key.ends_with(report["name"].as_str().unwrap()),
        "{report}"
    );
    assert_eq!(report["bytes"], size.to_string());
    assert!(
        report["checksum"].as_str().unwrap().starts_with("crc"),
        "{report}"
    );
    let stored = std::fs::read(store.join(key)).unwrap();
    let sha: String = Sha256::digest(&stored)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, report["sha256"].as_str().unwrap());
    // The page is told the gateway wants a token (it then says how to give one).
    let page = Command::new("curl")
        .args(["-s", &format!("{}/", gateway.url)])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&page.stdout).contains("\"auth\":true"));
}

/// The page on a gateway with `--direct` (Uppy 6's aws-s3 on a session the
/// page asks for with the token): the file goes to the bucket in one form POST
/// and is read back from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_page_sends_a_dropped_file_straight_to_the_bucket() {
    let Some(clients) = common::npm_clients("upload_page_direct") else {
        return;
    };
    let Some((endpoint, prefix, store)) = common::minio_prefix("upload-page-direct").await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let secret = work.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--direct", "--jwt-secret-file", secret.to_str().unwrap()],
    );
    let token = common::hs256_token(SECRET, json!({ "sub": "acme" }));
    let size = 3 * 1024 * 1024 + 17;
    let page = format!("{}/#token={token}", gateway.url);
    let report = tokio::task::spawn_blocking(move || {
        check(
            &clients,
            &[
                "upload",
                &page,
                &size.to_string(),
                &screenshot(&work, "ui-upload-direct.png"),
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(report["errors"], json!([]), "{report}");
    let key = report["key"].as_str().unwrap();
    assert!(key.starts_with("acme/"), "{report}");
    assert_eq!(report["bytes"], size.to_string());
    let stored = common::object_bytes(&store, key).await;
    let sha: String = Sha256::digest(&stored)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, report["sha256"].as_str().unwrap());
}

#[test]
fn the_dashboard_moves_while_the_gateway_works() {
    let Some(clients) = common::npm_clients("dashboard") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let admin = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap().to_string()
    };
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        work.path().join("store").to_str().unwrap(),
        "--admin-listen",
        &admin,
    ]);
    // The dashboard lives with /metrics: on the admin address only.
    assert_eq!(http_status(&format!("{}/ui/dashboard", gateway.url)), 404);
    assert_eq!(http_status(&format!("http://{admin}/ui/dashboard")), 200);
    let mut load = StopOnDrop(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "bench",
                "load",
                &format!("{}/v1/objects", gateway.url),
                "--users",
                "4",
                "--size",
                "256KiB",
                // Longer than the watch, however slowly Chromium starts: the
                // load is stopped once the dashboard has been read.
                "--duration",
                "120s",
                "--quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let report = check(
        &clients,
        &[
            "dashboard",
            &format!("http://{admin}/ui/dashboard"),
            "8",
            &screenshot(&work, "ui-dashboard.png"),
        ],
    );
    let still_loading = load.0.try_wait().unwrap().is_none();
    drop(load);
    assert!(
        still_loading,
        "the load ended before the dashboard was read"
    );
    assert_eq!(report["errors"], json!([]), "{report}");
    let charts = report["charts"].as_array().unwrap();
    for label in [
        "completions/s",
        "MiB/s in",
        "store requests/s",
        "store request latency (mean)",
    ] {
        let chart = charts
            .iter()
            .find(|c| c["label"] == label)
            .unwrap_or_else(|| panic!("no {label} chart: {report}"));
        assert_ne!(
            chart["before"], chart["after"],
            "{label} did not move: {report}"
        );
        let value: f64 = chart["value"]
            .as_str()
            .unwrap()
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(value > 0.0, "{label} reads {value} under load: {report}");
    }
}

/// A child process stopped when the test ends, however it ends.
struct StopOnDrop(std::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The status of a GET, by curl.
fn http_status(url: &str) -> u16 {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}
