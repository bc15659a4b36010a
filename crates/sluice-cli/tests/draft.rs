//! The IETF resumable-upload draft end to end: the built `sluice serve` in front
//! of the MinIO that scripts/test.sh starts, with its default settings, driven
//! by tus-js-client in the draft's modes (`ietf-draft-05`, interop 6, and
//! `ietf-draft-03`, interop 5) under Node and inside headless Chromium: 64 MiB
//! in 5 MiB chunks, the gateway SIGKILLed mid-upload and started again, the
//! upload resumed from the stored offset and read back whole (SHA-256).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::Digest as _;
use sluice_store::ObjectStore;
use sluice_testkit::test_data;

mod common;

use common::{client_events, minio_prefix, npm_clients};

const MIB: usize = 1 << 20;

/// Uppy's default retry delays (ms), which a gateway restart must fit in.
const UPPY_RETRY_DELAYS: &str = "[0, 1000, 3000, 5000]";

#[derive(Debug, Clone, Copy)]
enum Runner {
    Node,
    Chromium,
}

fn hex_sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The bytes tus_js_browser.mjs uploads.
fn browser_bytes(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| ((i * 7 + (i >> 11)) & 255) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tus_js_client_in_the_drafts_modes_resumes_after_the_gateway_is_killed() {
    let Some((endpoint, prefix, store)) = minio_prefix("draft_resume").await else {
        return;
    };
    let Some(clients) = npm_clients("draft_resume") else {
        return;
    };
    let size = 64 * MIB;
    let chunk = (5 * MIB).to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("draft.bin");
    let node_data = test_data(size, 38);
    std::fs::write(&file, &node_data).unwrap();
    let cases = [
        (Runner::Node, "ietf-draft-05"),
        (Runner::Node, "ietf-draft-03"),
        (Runner::Chromium, "ietf-draft-05"),
        (Runner::Chromium, "ietf-draft-03"),
    ];
    for (runner, protocol) in cases {
        let case = format!("{runner:?} {protocol}");
        let listen = common::free_loopback_address();
        let mut gateway = common::serve_on_minio(&endpoint, &prefix, &listen, &[]);
        let mut command = match runner {
            Runner::Node => {
                let mut c = Command::new("node");
                c.arg(format!("{clients}/tus_js_upload.mjs")).args([
                    format!("{}/v1/tus/", gateway.url),
                    file.to_str().unwrap().to_owned(),
                    chunk.clone(),
                ]);
                c
            }
            Runner::Chromium => {
                let mut c = Command::new("node");
                c.arg(format!("{clients}/tus_js_browser.mjs")).args([
                    gateway.url.clone(),
                    size.to_string(),
                    chunk.clone(),
                ]);
                c
            }
        };
        let mut child = command
            .env("TUS_PROTOCOL", protocol)
            .env("TUS_RETRY_DELAYS", UPPY_RETRY_DELAYS)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tus-js-client");
        // A quarter in, the gateway is killed without warning and started again.
        let seen = client_events(&mut child, |e| {
            e["offset"].as_u64().is_some_and(|o| o >= 16 * MIB as u64) || e["event"] == "error"
        });
        assert!(seen.iter().any(|e| e["event"] == "url"), "{case}: {seen:?}");
        gateway.child.kill().unwrap();
        gateway.child.wait().unwrap();
        let killed_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _restarted = common::serve_on_minio(&endpoint, &prefix, &listen, &[]);
        let rest = client_events(&mut child, |_| false);
        assert!(child.wait().unwrap().success(), "{case}: {rest:?}");
        let last = rest.last().unwrap();
        assert_eq!(last["event"], "success", "{case}: {rest:?}");
        // Resumed, not started over: the first offset after the restart is past 16 MiB.
        let first_after = rest.iter().find_map(|e| e["offset"].as_u64()).unwrap();
        assert!(
            first_after > 16 * MIB as u64,
            "{case}: restarted from {first_after}"
        );
        let key = last["key"].as_str().expect("the gateway named the object");
        let stored = common::object_bytes(&store, key).await;
        let expected = match runner {
            Runner::Node => hex_sha256(&node_data),
            Runner::Chromium => {
                let reported = last["sha256"].as_str().unwrap().to_owned();
                assert_eq!(reported, hex_sha256(&browser_bytes(size)), "{case}");
                reported
            }
        };
        assert_eq!(hex_sha256(&stored), expected, "{case}: content differs");
        let open = store.list_multipart_uploads("").await.unwrap();
        assert!(open.is_empty(), "{case}: open multipart uploads: {open:?}");
        eprintln!(
            "{case}: resumed from {first_after} and done {:.1} s after the kill",
            killed_at.elapsed().as_secs_f64()
        );
    }
}

/// The steps of tests/clients/draft_wire.mjs against one server, by name.
fn wire_steps(
    clients: &str,
    origin: &str,
    path: &str,
    interop: u8,
    max: u64,
) -> serde_json::Map<String, serde_json::Value> {
    let output = Command::new("node")
        .arg(format!("{clients}/draft_wire.mjs"))
        .args([origin, path, &interop.to_string(), &max.to_string()])
        .output()
        .expect("run draft_wire.mjs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let step: serde_json::Value = serde_json::from_str(line).unwrap();
            (step["step"].as_str().unwrap().to_owned(), step)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_the_draft_meets_every_step_on_the_wire() {
    let Some((endpoint, prefix, store)) = minio_prefix("draft_wire").await else {
        return;
    };
    let Some(clients) = npm_clients("draft_wire") else {
        return;
    };
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--max-upload-size", "64MiB"],
    );
    let max = 64 << 20;
    for interop in [8u8, 7, 6, 5, 3] {
        let steps = wire_steps(&clients, &gateway.url, "/v1/tus/", interop, max);
        let step = |name: &str| -> &serde_json::Value {
            steps
                .get(name)
                .unwrap_or_else(|| panic!("interop {interop}: no step {name}: {steps:?}"))
        };
        let header =
            |name: &str, header: &str| step(name)["headers"][header].as_str().map(str::to_owned);
        let status = |name: &str| step(name)["status"].as_u64().unwrap();
        let (open, done) = match interop {
            3 => (("upload-incomplete", "?1"), ("upload-incomplete", "?0")),
            _ => (("upload-complete", "?0"), ("upload-complete", "?1")),
        };
        let case = format!("interop {interop}");
        assert_eq!(status("careful creation"), 201, "{case}");
        assert_eq!(
            header("careful creation", open.0).as_deref(),
            Some(open.1),
            "{case}"
        );
        assert_eq!(status("offset"), 204, "{case}");
        assert_eq!(
            header("offset", "cache-control").as_deref(),
            Some("no-store"),
            "{case}"
        );
        assert_eq!(
            header("append", "upload-offset").as_deref(),
            Some("1048576"),
            "{case}"
        );
        // The cut append kept what came: the offset moved on and never back.
        let after_cut: u64 = header("offset after the cut", "upload-offset")
            .unwrap()
            .parse()
            .unwrap();
        assert!(after_cut > 1_048_576, "{case}: {after_cut}");
        assert_eq!(status("stale"), 409, "{case}");
        assert_eq!(
            header("stale", "upload-offset"),
            Some(after_cut.to_string()),
            "{case}"
        );
        assert_eq!(
            step("stale")["body"]["expected-offset"],
            after_cut,
            "{case}"
        );
        assert_eq!(status("last"), 201, "{case}");
        assert_eq!(header("last", done.0).as_deref(), Some(done.1), "{case}");
        assert_eq!(
            header("offset when complete", done.0).as_deref(),
            Some(done.1),
            "{case}"
        );
        assert_eq!(status("after complete"), 400, "{case}");
        assert_eq!(status("optimistic creation"), 201, "{case}");
        assert!(
            header("optimistic creation", "repr-digest").is_some(),
            "{case}"
        );
        assert_eq!(status("optimistic creation, wrong digest"), 400, "{case}");
        assert_eq!(status("cancel"), 204, "{case}");
        assert_eq!(status("offset after cancel"), 404, "{case}");
        assert_eq!(status("too large"), 413, "{case}");
        match interop {
            6 => assert!(
                header("offset", "upload-limit")
                    .unwrap()
                    .contains("expires="),
                "{case}"
            ),
            7 | 8 => assert!(
                header("offset", "upload-limit")
                    .unwrap()
                    .contains("max-age="),
                "{case}"
            ),
            _ => assert_eq!(header("offset", "upload-limit"), None, "{case}"),
        }
        // The object is the file, and the key is the one the gateway named.
        let key = step("last")["body"]["key"].as_str().unwrap();
        let stored = common::object_bytes(&store, key).await;
        assert_eq!(stored.len(), 3 * 1024 * 1024 + 17, "{case}");
    }
    let open = store.list_multipart_uploads("").await.unwrap();
    assert!(open.is_empty(), "open multipart uploads: {open:?}");
}
