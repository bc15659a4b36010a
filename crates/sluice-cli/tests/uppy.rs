//! Direct-to-bucket uploads with the real Uppy (issue 15): `@uppy/core`,
//! `@uppy/aws-s3` 5.x and `@uppy/golden-retriever` from npm, in headless
//! Chromium (tests/clients/uppy_direct.mjs), with the built `sluice serve
//! --direct` as their Companion and the MinIO of scripts/test.sh as the bucket.
//! Every stored object is read back and compared by SHA-256 with what the page
//! generated.

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sluice_store::ObjectStore;

mod common;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn token(tenant: &str, max_size: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "sub": tenant, "exp": now + 600, "max_size": max_size }),
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

/// Runs one case of uppy_direct.mjs and returns its report.
fn uppy(dir: &str, gateway: &str, bucket: &str, token: &str, case: &str, size: u64) -> Value {
    let output = Command::new("node")
        .arg(format!("{dir}/uppy_direct.mjs"))
        .args([case, &size.to_string()])
        .env("GATEWAY", gateway)
        .env("TOKEN", token)
        .env("BUCKET_ORIGIN", bucket)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "uppy_direct.mjs {case} {size}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("not JSON: {stdout}"))
}

async fn sha256_of(store: &dyn ObjectStore, key: &str) -> Option<String> {
    use futures::StreamExt;
    let mut body = store.get_object(key, None).await.ok()?.body;
    let mut hasher = Sha256::new();
    while let Some(chunk) = body.next().await {
        hasher.update(chunk.unwrap());
    }
    Some(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn metric(gateway: &str, line_start: &str) -> u64 {
    let text = reqwest::get(format!("{gateway}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uppy_uploads_straight_to_the_bucket_signed_by_the_gateway() {
    let Some(dir) = common::npm_clients("uppy_direct") else {
        return;
    };
    let Some((endpoint, prefix, store)) = common::minio_prefix("uppy-direct").await else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let secret = secrets.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &[
            "--direct",
            "--jwt-secret-file",
            secret.to_str().unwrap(),
            "--cors-origin",
            "http://localhost:5173",
        ],
    );
    let roomy = token("acme", 128 * MIB);
    // (what, case, size, token, stored)
    let cases = [
        (
            "300 KiB, one form POST",
            "upload",
            300 * KIB,
            roomy.clone(),
            true,
        ),
        ("64 MiB, multipart", "upload", 64 * MIB, roomy.clone(), true),
        (
            "64 MiB, page reloaded and resumed",
            "reload",
            64 * MIB,
            roomy.clone(),
            true,
        ),
        (
            "300 KiB over a max_size of 256 KiB",
            "upload",
            300 * KIB,
            token("acme", 256 * KIB),
            false,
        ),
        (
            "64 MiB over a max_size of 32 MiB",
            "upload",
            64 * MIB,
            token("acme", 32 * MIB),
            false,
        ),
    ];
    for (what, case, size, token, stored) in cases {
        let report = uppy(&dir, &gateway.url, &endpoint, &token, case, size);
        let sha = report["sha256"].as_str().unwrap_or_default().to_string();
        // No multipart upload is left open: completed, or aborted by Uppy
        // once refused (its abort may land just after the page gave up).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let open = store.list_multipart_uploads("").await.unwrap();
            if open.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{what}: left open: {open:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if !stored {
            assert_eq!(report["outcome"], "error", "{what}: {report}");
            continue;
        }
        assert_eq!(report["outcome"], "success", "{what}: {report}");
        assert_eq!(report["consoleErrors"], json!([]), "{what}: {report}");
        let key = report["body"]["key"].as_str().unwrap();
        // A form POST reports the bucket's key (with the store's prefix).
        let key = key.strip_prefix(prefix.as_str()).unwrap_or(key);
        assert!(key.starts_with("acme/"), "{what}: {key}");
        assert_eq!(sha256_of(&store, key).await, Some(sha), "{what}");
        let parts = (
            report["partPuts"].as_u64().unwrap(),
            report["partPutsAfterReload"].as_u64().unwrap(),
        );
        match (case, size) {
            ("upload", s) if s < 5 * MIB => assert_eq!(parts, (0, 0), "{what}: {report}"),
            ("upload", _) => assert_eq!(parts, (13, 0), "{what}: {report}"),
            _ => {
                assert!(
                    report["listParts"].as_u64().unwrap() >= 1,
                    "{what}: {report}"
                );
                assert!(
                    parts.1 >= 1 && parts.1 < 13,
                    "{what}: only the missing parts are sent again: {report}"
                );
            }
        }
    }
    // Nothing of the refused uploads is in the bucket: only the three objects.
    let listed = store.list_objects("acme/", None, 100).await.unwrap();
    assert_eq!(listed.objects.len(), 3, "{:?}", listed.objects);
    // Every upload went through the completion point: the form POST once the
    // gateway saw it in the bucket (within a few confirmation intervals).
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(
        &gateway.url,
        "sluice_uploads_completed_total{kind=\"direct_post\"}",
    )
    .await
        < 1
    {
        assert!(
            Instant::now() < deadline,
            "the form POST was never confirmed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        metric(
            &gateway.url,
            "sluice_uploads_completed_total{kind=\"direct_multipart\"}"
        )
        .await,
        2
    );
}
