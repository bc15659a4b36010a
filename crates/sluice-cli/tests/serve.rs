//! End-to-end tests of `sluice serve`: the built binary in front of the MinIO that
//! scripts/test.sh starts, driven over HTTP on loopback.

use std::io::{BufRead, BufReader, Write};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use sluice_store::{ChecksumAlgorithm, ObjectStore};
use sluice_testkit::test_data;

mod common;

use common::{minio_prefix as setup, Gateway};

/// Starts `sluice serve` on a free port against `s3://sluice-test/<prefix>`.
fn start(endpoint: &str, prefix: &str, extra: &[&str]) -> Gateway {
    common::serve_on_minio(endpoint, prefix, "127.0.0.1:0", extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_mixed_uploads_and_ranged_get() {
    let Some((endpoint, prefix, store)) = setup("serve_mixed").await else {
        return;
    };
    let gateway = start(&endpoint, &prefix, &[]);
    let client = reqwest::Client::new();
    let sizes = [
        0usize,
        1,
        10_000,
        5 * 1024 * 1024,
        17 * 1024 * 1024 + 3,
        40 * 1024 * 1024,
    ];
    let uploads = sizes.iter().enumerate().map(|(i, &size)| {
        let (client, url) = (client.clone(), gateway.url.clone());
        async move {
            let data = Bytes::from(test_data(size, i as u64));
            let answer: serde_json::Value = client
                .put(format!("{url}/v1/objects/mixed/{i}"))
                .body(data.clone())
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(answer["size"], size);
            assert_eq!(
                answer["checksum"],
                ChecksumAlgorithm::Crc32c.checksum(&data).to_string()
            );
            let back = client
                .get(format!("{url}/v1/objects/mixed/{i}"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert!(back == data, "object {i} differs");
        }
    });
    futures::future::join_all(uploads).await;

    let response = client
        .get(format!("{}/v1/objects/mixed/5", gateway.url))
        .header("Range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(
        response.headers()["content-range"],
        format!("bytes 1000-1999/{}", 40 * 1024 * 1024)
    );
    let expected = test_data(40 * 1024 * 1024, 5);
    assert_eq!(&response.bytes().await.unwrap()[..], &expected[1000..2000]);
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_post_of_several_files() {
    let Some((endpoint, prefix, store)) = setup("serve_form").await else {
        return;
    };
    let gateway = start(
        &endpoint,
        &prefix,
        &["--key-template", "{tenant}/{uuid}/{filename}"],
    );
    let files: Vec<(String, Vec<u8>)> = vec![
        ("small.txt".into(), b"small file".to_vec()),
        ("big.bin".into(), test_data(20 * 1024 * 1024, 9)),
        ("empty".into(), Vec::new()),
    ];
    let mut form = reqwest::multipart::Form::new().text("comment", "not a file");
    for (name, data) in &files {
        form = form.part(
            name.clone(),
            reqwest::multipart::Part::bytes(data.clone()).file_name(name.clone()),
        );
    }
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/objects", gateway.url))
        .header("x-sluice-tenant", "acme")
        .multipart(form)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let objects = answer["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 3);
    for ((name, data), object) in files.iter().zip(objects) {
        let key = object["key"].as_str().unwrap();
        assert!(
            key.starts_with("acme/") && key.ends_with(name.as_str()),
            "{key}"
        );
        let stored: Vec<Bytes> =
            futures::TryStreamExt::try_collect(store.get_object(key, None).await.unwrap().body)
                .await
                .unwrap();
        assert!(stored.concat() == *data, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_mid_upload_leaves_nothing() {
    let Some((endpoint, prefix, store)) = setup("serve_disconnect").await else {
        return;
    };
    let gateway = start(&endpoint, &prefix, &[]);
    let address = gateway.url.trim_start_matches("http://").to_string();
    // Announce 64 MiB, send 30 MiB (multipart started, parts stored), then vanish.
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    write!(
        socket,
        "PUT /v1/objects/cut HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        64 * 1024 * 1024
    )
    .unwrap();
    socket.write_all(&test_data(30 * 1024 * 1024, 3)).unwrap();
    let mut started = false;
    for _ in 0..100 {
        if !store.list_multipart_uploads("").await.unwrap().is_empty() {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started, "the multipart upload never started");
    drop(socket);
    let mut clean = false;
    for _ in 0..100 {
        if store.list_multipart_uploads("").await.unwrap().is_empty() {
            clean = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(clean, "a multipart upload was left behind");
    assert!(store.head_object("cut").await.unwrap_err().is_not_found());
    let metrics = reqwest::get(format!("{}/metrics", gateway.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("sluice_uploads_ended_total{outcome=\"failed\"} 1")
            || metrics.contains("outcome=\"aborted\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_answers_503_with_retry_after() {
    let Some((endpoint, prefix, _store)) = setup("serve_overload").await else {
        return;
    };
    let gateway = start(
        &endpoint,
        &prefix,
        &["--max-concurrent-uploads", "1", "--queue-length", "0"],
    );
    // Hold the only slot with a body that is still arriving.
    let holder = gateway.hold_a_slot().await;
    let response = reqwest::Client::new()
        .put(format!("{}/v1/objects/other", gateway.url))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "overloaded");
    drop(holder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_in_flight_uploads_finish() {
    let Some((endpoint, prefix, store)) = setup("serve_shutdown").await else {
        return;
    };
    let gateway = start(&endpoint, &prefix, &["--shutdown-grace", "20s"]);
    let address = gateway.url.trim_start_matches("http://").to_string();
    let data = test_data(24 * 1024 * 1024, 4);
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    write!(
        socket,
        "PUT /v1/objects/graceful HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        data.len()
    )
    .unwrap();
    socket.write_all(&data[..10 * 1024 * 1024]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SIGTERM while the upload is in flight, then send the rest.
    assert!(Command::new("kill")
        .args(["-TERM", &gateway.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    tokio::time::sleep(Duration::from_millis(200)).await;
    socket.write_all(&data[10 * 1024 * 1024..]).unwrap();
    let mut answer = String::new();
    BufReader::new(&socket).read_line(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let mut gateway = gateway;
    let status = gateway.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    let stored: Vec<Bytes> =
        futures::TryStreamExt::try_collect(store.get_object("graceful", None).await.unwrap().body)
            .await
            .unwrap();
    assert!(stored.concat() == data);
}

/// Issue 35: a missing bucket looked healthy (`/readyz` 200, every upload 502).
/// The start-up check finds what is wrong; readiness names it at once, uploads
/// get 503, and the gateway becomes ready when the store is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_used_is_not_ready_and_says_why() {
    let Some((endpoint, _, _)) = setup("serve-not-ready").await else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let bucket = format!("missing-{}-{nanos}", std::process::id());
    let store = format!("s3://{bucket}");
    let client = reqwest::Client::new();
    let ready = |url: String| {
        let client = client.clone();
        async move {
            let response = client.get(format!("{url}/readyz")).send().await.unwrap();
            let status = response.status().as_u16();
            let json: serde_json::Value = response.json().await.unwrap();
            (status, json["reason"].as_str().unwrap_or("").to_string())
        }
    };
    // (what, credentials, reason)
    let cases = [
        ("no such bucket", None, "bucket_missing"),
        (
            "a wrong secret",
            Some("not-the-secret"),
            "credentials_refused",
        ),
    ];
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--endpoint",
        &endpoint,
    ];
    let put = |url: String| {
        let client = client.clone();
        async move {
            let put = client.put(format!("{url}/v1/objects/k")).body("x");
            put.send().await.unwrap()
        }
    };
    for (what, secret, reason) in cases {
        let env: Vec<(&str, &str)> = secret
            .map(|s| vec![("AWS_SECRET_ACCESS_KEY", s)])
            .unwrap_or_default();
        let gateway = common::serve_with_env(&args, &env);
        assert_eq!(
            ready(gateway.url.clone()).await,
            (503, reason.to_string()),
            "{what}"
        );
        let put = put(gateway.url.clone()).await;
        assert_eq!(put.status(), 503, "{what}");
        assert!(put.headers().contains_key("retry-after"), "{what}");
    }
    // The bucket made while a gateway serves: ready within a probe or two.
    let gateway = common::serve(&args);
    assert_eq!(ready(gateway.url.clone()).await.0, 503);
    let mut config = sluice_store::s3::S3Config::new(bucket.clone());
    config.endpoint = Some(endpoint.clone());
    sluice_store::s3::S3Store::connect(config)
        .await
        .ensure_bucket()
        .await
        .unwrap();
    let made = std::time::Instant::now();
    while ready(gateway.url.clone()).await.0 != 200 {
        assert!(
            made.elapsed() < Duration::from_secs(5),
            "not ready after the bucket was made"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(put(gateway.url.clone()).await.status(), 201);
}

/// Issue 35, graceful drain. On SIGTERM `/readyz` says `draining` at once; new
/// uploads are still taken for the drain delay (the default, 5 s); then new
/// connections are refused, the upload in flight finishes, a resumable upload
/// still trickling when the grace ends is cut and stays resumable on another
/// gateway, and the drained gateway exits 0 inside its grace. The grace is 3 s
/// here, not the default 30 s: the trickling upload would hold the test for all
/// of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_a_cut_resumable_upload_goes_on_elsewhere() {
    let Some((endpoint, prefix, store)) = setup("serve_drain").await else {
        return;
    };
    let draining = start(&endpoint, &prefix, &["--shutdown-grace", "3s"]);
    let other = start(&endpoint, &prefix, &[]);
    let address = draining.url.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();
    let data = test_data(24 * 1024 * 1024, 9);

    // A resumable upload whose PATCH trickles and never ends by itself.
    let tus_data = test_data(6 * 1024 * 1024, 10);
    let created = client
        .post(format!("{}/v1/tus/", draining.url))
        .header("tus-resumable", "1.0.0")
        .header("upload-length", tus_data.len())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_string();
    let path = location
        .split_once("://")
        .map_or(location.as_str(), |(_, rest)| {
            &rest[rest.find('/').unwrap()..]
        })
        .to_string();
    let other_location = format!("{}{path}", other.url);
    let mut patch = std::net::TcpStream::connect(&address).unwrap();
    write!(
        patch,
        "PATCH {path} HTTP/1.1\r\nHost: {address}\r\nTus-Resumable: 1.0.0\r\n\
         Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\n\
         Content-Length: {}\r\n\r\n",
        tus_data.len()
    )
    .unwrap();
    patch.write_all(&tus_data[..2 * 1024 * 1024]).unwrap();
    let trickle = std::thread::spawn({
        let mut patch = patch.try_clone().unwrap();
        let rest = tus_data[2 * 1024 * 1024..4 * 1024 * 1024].to_vec();
        move || {
            for piece in rest.chunks(64 * 1024) {
                if patch.write_all(piece).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    });

    // A plain upload in flight at the signal.
    let mut socket = std::net::TcpStream::connect(&address).unwrap();
    write!(
        socket,
        "PUT /v1/objects/in-flight HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
        data.len()
    )
    .unwrap();
    socket.write_all(&data[..10 * 1024 * 1024]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let signalled = std::time::Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &draining.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ready = client
        .get(format!("{}/readyz", draining.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(ready["reason"], "draining");
    // Within the drain delay, a new upload is still taken.
    let put = reqwest::Client::new()
        .put(format!("{}/v1/objects/during-delay", draining.url))
        .body("taken")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    socket.write_all(&data[10 * 1024 * 1024..]).unwrap();
    let mut answer = String::new();
    BufReader::new(&socket).read_line(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    // After it, new connections are refused.
    tokio::time::sleep(
        Duration::from_secs(5).saturating_sub(signalled.elapsed()) + Duration::from_millis(500),
    )
    .await;
    let late = reqwest::Client::new()
        .put(format!("{}/v1/objects/too-late", draining.url))
        .body("refused")
        .send()
        .await;
    assert!(late.is_err(), "a new connection after the delay: {late:?}");
    // The trickling PATCH is cut at the end of the grace; the gateway exits 0.
    let mut draining = draining;
    let status = draining.child.wait().unwrap();
    let exited = signalled.elapsed();
    assert!(status.success(), "exit status {status:?}");
    // The delay, the grace, and at most 5 s for the cut requests to commit.
    assert!(
        exited <= Duration::from_secs(5 + 3 + 5),
        "exited after {exited:?}"
    );
    drop(patch);
    trickle.join().unwrap();

    // The cut upload goes on at the other gateway from what was stored.
    let head = client
        .head(&other_location)
        .header("tus-resumable", "1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    let offset: usize = head.headers()["upload-offset"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(offset >= 2 * 1024 * 1024, "offset {offset}");
    let resumed = client
        .patch(&other_location)
        .header("tus-resumable", "1.0.0")
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", offset)
        .body(tus_data[offset..].to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 204, "{:?}", resumed.text().await);
    let key = head_key(&client, &other_location).await;
    for (key, want) in [("in-flight".to_string(), &data), (key, &tus_data)] {
        assert!(common::object_bytes(&store, &key).await == *want, "{key}");
    }
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
    eprintln!(
        "drained: exit 0 after {exited:?}; the cut upload resumed elsewhere from {offset} bytes"
    );
}

/// The key a finished tus upload was stored under.
async fn head_key(client: &reqwest::Client, location: &str) -> String {
    let head = client
        .head(location)
        .header("tus-resumable", "1.0.0")
        .send()
        .await
        .unwrap();
    head.headers()
        .get("x-sluice-key")
        .map(|k| k.to_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no X-Sluice-Key: {:?}", head.headers()))
}
