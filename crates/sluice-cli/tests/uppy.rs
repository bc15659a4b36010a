//! Direct-to-bucket uploads with the real Uppy (issues 15 and 50): `@uppy/core`,
//! `@uppy/aws-s3` and `@uppy/golden-retriever` from npm, 5.x
//! (tests/clients/uppy_direct.mjs) and 6.3 in its three modes
//! (tests/clients/uppy6/uppy6_direct.mjs), in headless Chromium, with the
//! built `sluice serve --direct` as their Companion, signer or credential
//! vendor and the MinIO of scripts/test.sh as the bucket.
//! Every stored object is read back and compared by SHA-256 with what the page
//! generated.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sluice_store::ObjectStore;

mod common;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn token(tenant: &str, max_size: u64) -> String {
    common::hs256_token(SECRET, json!({ "sub": tenant, "max_size": max_size }))
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

/// Starts tests/clients/uppy6/uppy6_direct.mjs for one mode and case.
fn uppy6(
    dir: &str,
    gateway: &str,
    bucket: &str,
    token: &str,
    mode: &str,
    case: &str,
    size: u64,
) -> std::process::Child {
    Command::new("node")
        .arg(format!("{dir}/uppy6/uppy6_direct.mjs"))
        .args([mode, case, &size.to_string()])
        .env("GATEWAY", gateway)
        .env("TOKEN", token)
        .env("BUCKET_ORIGIN", bucket)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run node")
}

/// The report line of a run of uppy6_direct.mjs; `on_parts(n)` hears of every
/// part that reached the bucket (the slow case).
fn uppy6_report(mut child: std::process::Child, mut on_parts: impl FnMut(u64)) -> Value {
    let events = common::client_events(&mut child, |line| {
        if let Some(parts) = line["parts"].as_u64() {
            on_parts(parts);
        }
        line.get("outcome").is_some()
    });
    let _ = child.wait();
    events
        .last()
        .cloned()
        .expect("a report from uppy6_direct.mjs")
}

/// Every event in the outbox, by the key it announces: (upload kind, count).
async fn outbox_events(
    store: &dyn ObjectStore,
) -> std::collections::BTreeMap<String, (String, usize)> {
    let mut events = std::collections::BTreeMap::new();
    let listed = store
        .list_objects("_sluice/events/pending/", None, 1000)
        .await
        .unwrap();
    for entry in listed.objects {
        let bytes = common::object_bytes(store, &entry.key).await;
        let entry: Value = serde_json::from_slice(&bytes).unwrap();
        let data = &entry["event"]["data"];
        let slot = events
            .entry(data["key"].as_str().unwrap().to_string())
            .or_insert((
                data["upload_kind"].as_str().unwrap_or_default().to_string(),
                0,
            ));
        slot.1 += 1;
    }
    events
}

/// Uppy 6 (`@uppy/aws-s3` 6.3.1) in headless Chromium, in each of its three
/// modes against `sluice serve --direct`: `companionEndpoint` on a sealed
/// session path, `signRequest` through `POST /s3/sign`, `getCredentials` from
/// `GET /s3/sts` (MinIO's STS). Each mode uploads a small file (one request),
/// a 64 MiB file (multipart), a 64 MiB file whose page is reloaded half-way
/// (GoldenRetriever resumes it) and a 24 MiB file while the gateway is
/// SIGKILLed and started again. Every object is byte-exact, has exactly one
/// `upload.completed` of its mode's kind, and no multipart upload is left.
/// Then a second tenant tries the first one's upload in each mode: refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uppy_6_uploads_in_each_mode_with_one_event_each_through_reloads_and_kills() {
    let Some(dir) = common::npm_clients("uppy6_direct") else {
        return;
    };
    let Some((endpoint, prefix, store)) = common::minio_prefix("uppy6-direct").await else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let secret = secrets.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let address = common::free_loopback_address();
    let args = [
        "--direct",
        "--jwt-secret-file",
        secret.to_str().unwrap(),
        "--cors-origin",
        "http://localhost:5173",
        // Nothing listens there: events stay in the outbox, to be counted.
        "--event-url",
        "http://127.0.0.1:9/events",
        "--event-secret-file",
        secret.to_str().unwrap(),
    ];
    let mut gateway = common::serve_on_minio(&endpoint, &prefix, &address, &args);
    let url = gateway.url.clone();
    let acme = token("acme", 128 * MIB);
    // (mode, kind of the small upload's event, of the big ones')
    let modes = [
        ("companion", "direct_post", "direct_multipart"),
        ("sign", "direct_post", "direct_multipart"),
        ("sts", "direct_credentials", "direct_credentials"),
    ];
    // (case, size)
    let cases = [
        ("upload", 300 * KIB),
        ("upload", 64 * MIB),
        ("reload", 64 * MIB),
        ("slow", 24 * MIB),
    ];
    let mut stored = std::collections::BTreeMap::new();
    for (mode, small_kind, big_kind) in modes {
        for (case, size) in cases {
            let what = format!("{mode} {case} {size}");
            let child = uppy6(&dir, &url, &endpoint, &acme, mode, case, size);
            let mut killed = false;
            let report = uppy6_report(child, |parts| {
                // The gateway dies with two parts in and is back at once.
                if case == "slow" && parts >= 2 && !killed {
                    killed = true;
                    let _ = gateway.child.kill();
                    let _ = gateway.child.wait();
                    gateway = common::serve_on_minio(&endpoint, &prefix, &address, &args);
                }
            });
            assert_eq!(report["outcome"], "success", "{what}: {report}");
            // A request cut by the kill shows in the console; nothing else may.
            if case != "slow" {
                assert_eq!(report["consoleErrors"], json!([]), "{what}: {report}");
            }
            assert_eq!(killed, case == "slow", "{what}: {report}");
            let key = report["body"]["key"].as_str().unwrap();
            let key = key.strip_prefix(prefix.as_str()).unwrap_or(key).to_string();
            assert!(key.starts_with("acme/"), "{what}: {key}");
            let sha = report["sha256"].as_str().unwrap().to_string();
            assert_eq!(sha256_of(&store, &key).await, Some(sha), "{what}");
            let kind = if size < 5 * MIB { small_kind } else { big_kind };
            stored.insert(key, (kind.to_string(), what));
        }
    }
    // One event each, of its mode's kind, within a few confirmation intervals.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = outbox_events(&store).await;
        let want: std::collections::BTreeMap<String, (String, usize)> = stored
            .iter()
            .map(|(key, (kind, _))| (key.clone(), (kind.clone(), 1)))
            .collect();
        if events == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "events {events:#?}\nwanted {want:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let open = store.list_multipart_uploads("").await.unwrap();
        if open.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left open: {open:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    confinement(&url, &endpoint, &prefix, &store).await;
}

/// A second tenant's token against the first one's upload, in each mode.
async fn confinement(
    gateway: &str,
    endpoint: &str,
    prefix: &str,
    store: &sluice_store::s3::S3Store,
) {
    let victim = "acme/victim.bin";
    let upload_id = store
        .create_multipart_upload(sluice_store::CreateMultipartRequest {
            key: victim.into(),
            content_type: None,
            metadata: Default::default(),
            settings: Default::default(),
            checksum_algorithm: None,
        })
        .await
        .unwrap();
    let bob = token("bob", 128 * MIB);
    let client = reqwest::Client::new();
    let session: Value = client
        .post(format!("{gateway}/s3/session"))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let path = session["path"].as_str().unwrap();
    let tampered = format!("{}x", path);
    let query = format!("key={}", victim.replace('/', "%2F"));
    // (what, method, url, body, status)
    let cases: Vec<(&str, &str, String, Option<Value>, u16)> = vec![
        (
            "companion: sign acme's part",
            "GET",
            format!("{gateway}{path}/s3/multipart/{upload_id}/1?{query}"),
            None,
            404,
        ),
        (
            "companion: list acme's parts",
            "GET",
            format!("{gateway}{path}/s3/multipart/{upload_id}?{query}"),
            None,
            404,
        ),
        (
            "companion: a tampered session",
            "GET",
            format!("{gateway}{tampered}/s3/multipart/{upload_id}?key=bob%2Fx"),
            None,
            401,
        ),
        (
            "sign: acme's part",
            "POST",
            format!("{gateway}/s3/sign"),
            Some(json!({"method": "PUT", "key": victim, "uploadId": upload_id, "partNumber": 1})),
            404,
        ),
        (
            "sign: complete acme's upload",
            "POST",
            format!("{gateway}/s3/sign"),
            Some(json!({"method": "POST", "key": victim, "uploadId": upload_id})),
            404,
        ),
        (
            "sign: abort acme's upload",
            "POST",
            format!("{gateway}/s3/sign"),
            Some(json!({"method": "DELETE", "key": victim, "uploadId": upload_id})),
            404,
        ),
        (
            "sign: a deletion",
            "POST",
            format!("{gateway}/s3/sign"),
            Some(json!({"method": "DELETE", "key": "bob/x"})),
            403,
        ),
    ];
    for (what, method, url, body, status) in cases {
        let mut request = client.request(method.parse().unwrap(), &url);
        if !url.contains("/s3/session/") {
            request = request.bearer_auth(&bob);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(
            answer.status().as_u16(),
            status,
            "{what}: {}",
            answer.text().await.unwrap()
        );
    }
    // Temporary credentials write under their own prefix and nowhere else.
    let sts: Value = client
        .get(format!("{gateway}/s3/sts"))
        .bearer_auth(&bob)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let own = sts["prefix"].as_str().unwrap().to_string();
    assert!(own.starts_with(&format!("{prefix}bob/")), "{own}");
    let credentials = aws_sdk_s3::config::Credentials::new(
        sts["credentials"]["AccessKeyId"].as_str().unwrap(),
        sts["credentials"]["SecretAccessKey"].as_str().unwrap(),
        sts["credentials"]["SessionToken"]
            .as_str()
            .map(str::to_owned),
        None,
        "sluice-sts",
    );
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(credentials)
        .http_client(sluice_store::s3::http_client())
        .build();
    let s3 = aws_sdk_s3::Client::from_conf(config);
    let bucket = sluice_testkit::minio::TEST_BUCKET;
    // (what, key, allowed)
    let puts = [
        ("its own prefix", format!("{own}ok.bin"), true),
        ("acme's key", format!("{prefix}{victim}"), false),
        (
            "bob's prefix outside its own",
            format!("{prefix}bob/else.bin"),
            false,
        ),
    ];
    for (what, key, allowed) in puts {
        let put = s3
            .put_object()
            .bucket(bucket)
            .key(&key)
            .body(aws_sdk_s3::primitives::ByteStream::from_static(b"x"))
            .send()
            .await;
        assert_eq!(put.is_ok(), allowed, "sts: {what}: {put:?}");
    }
    let read = s3
        .get_object()
        .bucket(bucket)
        .key(format!("{own}ok.bin"))
        .send()
        .await;
    assert!(read.is_err(), "sts credentials read nothing");
    store
        .abort_multipart_upload(victim, &upload_id)
        .await
        .unwrap();
}
