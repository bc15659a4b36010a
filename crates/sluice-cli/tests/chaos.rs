//! The gateway against a misbehaving store, end to end: the built binary behind
//! the fault-injecting proxy in front of MinIO, a store taken away mid-run (MinIO
//! killed or frozen, or every request failed or stalled by the proxy), and a
//! gateway killed mid-upload and cleaned up after by `sluice janitor`.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::metric;
use common::own_minio::OwnMinio;
use common::{minio_prefix, serve_on_minio};
use futures::{StreamExt, TryStreamExt};
use sluice_chaos::{ChaosConfig, ChaosProxy, FaultRates};
use sluice_store::s3::S3Store;
use sluice_store::{ChecksumAlgorithm, ObjectStore};

const KIB: u64 = 1024;

/// The fault tests load the machine heavily; they take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const MIB: u64 = 1024 * 1024;

/// Deterministic bytes for upload `seed`.
fn data(seed: u64, len: u64) -> Bytes {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len as usize);
    Bytes::from(out)
}

/// Sizes from 10 KiB to 64 MiB, spread log-uniformly, the same every run.
fn mixed_size(i: u64) -> u64 {
    let fraction = ((i * 7919) % 1000) as f64 / 999.0;
    let (low, high) = ((10 * KIB) as f64, (64 * MIB) as f64);
    (low * (high / low).powf(fraction)) as u64
}

fn crc(bytes: &[u8]) -> String {
    ChecksumAlgorithm::Crc32c.checksum(bytes).to_base64()
}

/// The CRC32C of an object read straight from MinIO; None when it is absent.
/// The size and CRC32C of the object at `key`, read whole; None when there is
/// none. A read that breaks off (on a loaded machine MinIO may send nothing
/// for longer than the store's stall floor) is read again, a few times: this
/// is the test checking the bucket, not the product under test.
async fn stored_crc(store: &S3Store, key: &str) -> Option<(u64, String)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match read_crc(store, key).await {
            Ok(found) => return found,
            Err(e) if attempt < 5 => {
                eprintln!("reading {key} again after: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("reading {key}: {e}"),
        }
    }
}

async fn read_crc(
    store: &S3Store,
    key: &str,
) -> Result<Option<(u64, String)>, sluice_store::StoreError> {
    let output = match store.get_object(key, None).await {
        Ok(output) => output,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut hasher = sluice_store::Hasher::new(ChecksumAlgorithm::Crc32c);
    let mut size = 0;
    let mut body = output.body;
    while let Some(chunk) = body.try_next().await? {
        size += chunk.len() as u64;
        hasher.update(&chunk);
    }
    Ok(Some((size, hasher.finish().to_base64())))
}

async fn open_uploads(store: &S3Store) -> Vec<sluice_store::MultipartUploadInfo> {
    store.list_multipart_uploads("").await.unwrap()
}

/// PUT /v1/objects/{key}; the status and, for errors, the JSON error code.
async fn put(client: &reqwest::Client, gateway: &str, key: &str, body: Bytes) -> (u16, String) {
    match client
        .put(format!("{gateway}/v1/objects/{key}"))
        .body(body)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            let json: serde_json::Value = response.json().await.unwrap_or_default();
            if status == 503 {
                assert!(retry_after, "503 without Retry-After: {json}");
            }
            (
                status,
                json["error"]["code"].as_str().unwrap_or("").to_string(),
            )
        }
        Err(e) => (0, format!("transport: {e}")),
    }
}

/// PUT as a well-behaved client does: a 503 (the gateway counting the store
/// as down, or its retries spent; it comes with Retry-After) is tried again a
/// second later, at most 5 times. Returns the last answer as [`put`] does.
async fn put_honouring_retry_after(
    client: &reqwest::Client,
    gateway: &str,
    key: &str,
    body: Bytes,
) -> (u16, String) {
    let mut answer = put(client, gateway, key, body.clone()).await;
    for _ in 0..5 {
        if answer.0 != 503 {
            break;
        }
        eprintln!("PUT {key}: 503 {}; trying again", answer.1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        answer = put(client, gateway, key, body.clone()).await;
    }
    answer
}

/// A tus upload of `body` in `chunk`-sized PATCHes, resuming from HEAD after a
/// failed PATCH as tus clients do (at most 5 times). Returns the object key.
async fn tus_upload(
    client: &reqwest::Client,
    gateway: &str,
    name: &str,
    body: Bytes,
    chunk: u64,
) -> Result<String, String> {
    use base64::Engine as _;
    let metadata = format!(
        "filename {}",
        base64::engine::general_purpose::STANDARD.encode(name)
    );
    // A 503 (the store counted as down) is tried again a second later, at most 5 times.
    let mut tries = 0;
    let created = loop {
        let created = client
            .post(format!("{gateway}/v1/tus/"))
            .header("tus-resumable", "1.0.0")
            .header("upload-length", body.len())
            .header("upload-metadata", &metadata)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        tries += 1;
        if created.status() != 503 || tries > 5 {
            break created;
        }
        eprintln!("tus {name}: create answered 503; trying again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if created.status() != 201 {
        return Err(format!("create answered {}", created.status()));
    }
    let url = format!(
        "{gateway}{}",
        created.headers()["location"].to_str().unwrap()
    );
    let mut offset = 0u64;
    let mut resumes = 0;
    while offset < body.len() as u64 || body.is_empty() {
        let end = (offset + chunk).min(body.len() as u64);
        let answer = client
            .patch(&url)
            .header("tus-resumable", "1.0.0")
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", offset)
            .body(body.slice(offset as usize..end as usize))
            .send()
            .await;
        match answer {
            Ok(r) if r.status() == 204 => {
                offset = r.headers()["upload-offset"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.is_empty() {
                    break;
                }
            }
            other => {
                // A 423 says how long the lock it met will last (a release the
                // faulty store refused lapses with its lease): a client waits
                // that long, as tus clients retrying with Uppy's delays do.
                let wait = match &other {
                    Ok(r) => r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map_or(Duration::from_millis(500), |s| {
                            Duration::from_secs(s.min(10))
                        }),
                    Err(_) => Duration::from_millis(500),
                };
                let failure = match other {
                    Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                    Err(e) => e.to_string(),
                };
                resumes += 1;
                if resumes > 5 {
                    return Err(format!("PATCH kept failing, last: {failure}"));
                }
                eprintln!("tus {name}: PATCH at {offset} failed ({failure}); resuming");
                tokio::time::sleep(wait).await;
                // Find out where to resume.
                offset = head_upload(client, &url, name).await?["upload-offset"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
            }
        }
    }
    let headers = head_upload(client, &url, name).await?;
    Ok(headers["x-sluice-key"].to_str().unwrap().to_owned())
}

/// The headers of a tus upload's HEAD. It reads the upload's record through
/// the faulty proxy too, so a failed HEAD is retried (at most 5 times), as a
/// client retries a PATCH.
async fn head_upload(
    client: &reqwest::Client,
    url: &str,
    name: &str,
) -> Result<reqwest::header::HeaderMap, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let head = client
            .head(url)
            .header("tus-resumable", "1.0.0")
            .send()
            .await;
        match head {
            Ok(h) if h.status() == 200 => return Ok(h.headers().clone()),
            Ok(h) => last = format!("answered {}", h.status()),
            Err(e) => last = e.to_string(),
        }
        eprintln!("tus {name}: HEAD {last}; retrying");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("HEAD kept failing, last: {last}"))
}

/// 1,000 uploads (raw PUTs and tus uploads, 10 KiB to 64 MiB, 8 at a time)
/// through the proxy's throttling, resets and 500s: each is stored whole and
/// nothing is left open. The clients behave as real ones: a tus client resumes
/// from HEAD after a failed PATCH, and a 503 (with Retry-After) is tried again a
/// second later: with 3% of requests failing, three in a row now and then open
/// the breaker for a second, or a burst of throttling spends the retry budget
/// (a CI run saw six uploads answered 503 at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_mixed_uploads_survive_throttling_resets_and_errors() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some((endpoint, prefix, store)) = minio_prefix("chaos-mixed").await else {
        return;
    };
    let faults = FaultRates {
        slowdown: 0.10,
        internal_error: 0.01,
        reset_request: 0.01,
        reset_response: 0.01,
        stall: 0.0,
    };
    let proxy = ChaosProxy::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &endpoint,
        ChaosConfig {
            faults,
            ..ChaosConfig::default()
        },
    )
    .await
    .unwrap();
    let gateway = serve_on_minio(
        &proxy.url(),
        &prefix,
        "127.0.0.1:0",
        &["--janitor-interval", "0s"],
    );
    let gateway_url = Arc::new(gateway.url.clone());
    let client = reqwest::Client::new();
    let started = Instant::now();
    let store = &store;
    let results = futures::stream::iter(0..1000u64)
        .map(|i| {
            let client = client.clone();
            let gateway = gateway_url.clone();
            async move {
                let size = mixed_size(i);
                let body = data(i, size);
                let expected = crc(&body);
                let outcome = if i % 2 == 0 {
                    let key = format!("put/{i}");
                    match put_honouring_retry_after(&client, &gateway, &key, body).await {
                        (201, _) => Ok(key),
                        (status, code) => Err(format!("PUT {i} ({size} bytes): {status} {code}")),
                    }
                } else {
                    tus_upload(&client, &gateway, &format!("tus-{i}"), body, 8 * MIB)
                        .await
                        .map_err(|e| format!("tus {i} ({size} bytes): {e}"))
                };
                // Checked straight away and deleted: ~7 GiB in all stays off the disk.
                let outcome = match outcome {
                    Ok(key) => {
                        let stored = stored_crc(store, &key).await;
                        store.delete_object(&key).await.unwrap();
                        if stored == Some((size, expected.clone())) {
                            Ok(key)
                        } else {
                            Err(format!("upload {i} at {key}: stored {stored:?}, expected {size} bytes {expected}"))
                        }
                    }
                    Err(e) => Err(e),
                };
                (i, size, expected, outcome)
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let elapsed = started.elapsed();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.3.as_ref().err()).collect();
    assert!(
        failures.is_empty(),
        "{} failed: {failures:?}",
        failures.len()
    );
    let open = open_uploads(store).await;
    assert!(
        open.is_empty(),
        "incomplete multipart uploads left: {open:?}"
    );
    let totals = proxy.stats().totals;
    eprintln!(
        "1000 uploads in {:.1}s through the proxy: {:?}",
        elapsed.as_secs_f64(),
        totals
    );
    // The faults were really there.
    assert!(totals.slowdown > 100, "{totals:?}");
    assert!(
        totals.reset_request + totals.reset_response > 20,
        "{totals:?}"
    );
    assert!(totals.internal_error > 5, "{totals:?}");
}

/// How the store goes away.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outage {
    /// MinIO killed, then started again: connections refused.
    Killed,
    /// MinIO stopped with SIGSTOP, then SIGCONT: connections accepted, never answered.
    Frozen,
    /// The chaos proxy in front of MinIO answers every request 500 InternalError.
    FailingThroughProxy,
    /// The chaos proxy lets MinIO handle every request and holds every answer back.
    StalledThroughProxy,
}

/// The store as the gateway sees it: MinIO, straight or behind the chaos proxy,
/// and the means to take it away and give it back.
struct OutageStore {
    outage: Outage,
    minio: Option<OwnMinio>,
    proxy: Option<ChaosProxy>,
}

impl OutageStore {
    async fn start(outage: Outage) -> OutageStore {
        let minio = OwnMinio::start();
        let proxy = match outage {
            Outage::Killed | Outage::Frozen => None,
            Outage::FailingThroughProxy | Outage::StalledThroughProxy => Some(
                ChaosProxy::start(
                    SocketAddr::from(([127, 0, 0, 1], 0)),
                    &minio.endpoint(),
                    Self::healthy(),
                )
                .await
                .unwrap(),
            ),
        };
        OutageStore {
            outage,
            minio: Some(minio),
            proxy,
        }
    }

    /// The proxy passing everything through (no write cap either).
    fn healthy() -> ChaosConfig {
        ChaosConfig {
            write_rate_per_prefix: None,
            stall_for: Duration::from_secs(30),
            ..ChaosConfig::default()
        }
    }

    /// A bucket on MinIO itself (made if missing), for checking what was stored.
    async fn bucket(&self, name: &str) -> S3Store {
        let mut config = sluice_store::s3::S3Config::new(name);
        config.endpoint = Some(self.minio_endpoint());
        let store = S3Store::connect(config).await;
        // A MinIO just started may answer 503 for a moment while it initialises.
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(error) = store.ensure_bucket().await {
            assert!(Instant::now() < deadline, "{error}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        store
    }

    /// MinIO itself, for checking what was stored.
    fn minio_endpoint(&self) -> String {
        self.minio.as_ref().expect("running").endpoint()
    }

    /// Where the gateway sends its requests.
    fn gateway_endpoint(&self) -> String {
        match &self.proxy {
            Some(proxy) => proxy.url(),
            None => self.minio_endpoint(),
        }
    }

    fn take_away(&mut self) {
        let minio = self.minio.as_mut().expect("running");
        let faults = match self.outage {
            Outage::Killed => return minio.stop(),
            Outage::Frozen => return minio.signal("STOP"),
            Outage::FailingThroughProxy => FaultRates {
                internal_error: 1.0,
                ..FaultRates::default()
            },
            Outage::StalledThroughProxy => FaultRates {
                stall: 1.0,
                ..FaultRates::default()
            },
        };
        let proxy = self.proxy.as_ref().expect("a proxy");
        proxy
            .set_config(ChaosConfig {
                faults,
                ..Self::healthy()
            })
            .unwrap();
    }

    /// Gives the store back (restarting MinIO blocks, so off the runtime).
    async fn give_back(mut self) -> OutageStore {
        if let Some(proxy) = &self.proxy {
            proxy.set_config(Self::healthy()).unwrap();
            return self;
        }
        tokio::task::spawn_blocking(move || {
            let minio = self.minio.as_mut().expect("running");
            match self.outage {
                Outage::Killed => minio.resume(),
                _ => minio.signal("CONT"),
            }
            self
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_fails_uploads_cleanly_and_the_gateway_recovers() {
    store_outage(Outage::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_is_detected_and_the_gateway_recovers() {
    store_outage(Outage::Frozen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_every_request_is_detected_and_the_gateway_recovers() {
    store_outage(Outage::FailingThroughProxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_answering_nothing_is_detected_and_the_gateway_recovers() {
    store_outage(Outage::StalledThroughProxy).await;
}

/// Issue 13: with the store down, uploads hung for minutes (each store request
/// waited out the stall timeout, then retried). Now, once the gateway has seen
/// the store fail, new uploads get 503 + Retry-After within 2 s, uploads in
/// flight fail within the stall timeout, nothing is left half-written, no
/// client sees a reset connection, and uploads succeed again within 2 s of the
/// store's return. Each bound is the promise plus twice the longest upload
/// before the outage, measured in the same run: on a loaded 2-core machine
/// every step takes longer alike, and a fixed bound proves nothing there.
async fn store_outage(outage: Outage) {
    let _turn = ONE_AT_A_TIME.lock().await;
    if common::minio_prefix("chaos-outage").await.is_none() {
        return;
    }
    let mut outage_store = OutageStore::start(outage).await;
    let endpoint = outage_store.gateway_endpoint();
    let store = outage_store.bucket("outage").await;
    // With the default settings: a healthy MinIO's waits are far under the
    // floor of the stall deadline, so the deadline is the floor.
    let stall_timeout = Duration::from_secs(5);
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        "s3://outage",
        "--endpoint",
        &endpoint,
    ]);
    let gateway_url = Arc::new(gateway.url.clone());
    let client = reqwest::Client::new();
    let started = Instant::now();
    // An upload every 200 ms for 24 s, 1 MiB and 20 MiB (multipart) in turn;
    // MinIO is down from 4 s to 16 s.
    let mut tasks = Vec::new();
    for i in 0..120u64 {
        let at = Duration::from_millis(200 * i);
        let client = client.clone();
        let gateway = gateway_url.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(started + at)).await;
            let size = if i % 2 == 0 { MIB } else { 20 * MIB };
            let body = data(1000 + i, size);
            let expected = crc(&body);
            let sent = started.elapsed();
            let (status, code) = put(&client, &gateway, &format!("o/{i}"), body).await;
            (i, size, expected, sent, started.elapsed(), status, code)
        }));
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(
        started + Duration::from_secs(4),
    ))
    .await;
    outage_store.take_away();
    let stopped = started.elapsed();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let _outage_store = outage_store.give_back().await;
    let resumed = started.elapsed();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    // How long an upload takes on this machine right now, from the ones that
    // ran before the outage: the bounds below are the product's promises plus
    // that much (a loaded 2-core machine stretches every step alike).
    let normal = outcomes
        .iter()
        .filter(|o| o.5 == 201 && o.4 < stopped)
        .map(|o| o.4 - o.3)
        .max()
        .unwrap_or_default();
    let slack = 2 * normal;
    eprintln!("{outage:?}: uploads before the outage took up to {normal:?}; slack {slack:?}");
    // The store counts as down from the first 503 on.
    let detected = outcomes
        .iter()
        .filter(|o| o.5 == 503)
        .map(|o| o.4)
        .min()
        .expect("the outage failed some uploads");
    assert!(
        detected <= stopped + stall_timeout + Duration::from_secs(3) + slack,
        "{outage:?}: down from {stopped:?}, first 503 at {detected:?}"
    );
    let (mut ok, mut failed) = (0, 0);
    for (i, size, expected, sent, ended, status, code) in &outcomes {
        let stored = stored_crc(&store, &format!("o/{i}")).await;
        let case =
            format!("{outage:?}: upload {i} sent at {sent:?}, ended {ended:?}: {status} {code}");
        match status {
            201 => {
                ok += 1;
                assert_eq!(stored, Some((*size, expected.clone())), "{case}");
            }
            502 | 503 => {
                failed += 1;
                assert!(code.starts_with("store_"), "{case}");
                if matches!(outage, Outage::StalledThroughProxy | Outage::Frozen) {
                    // The store may have done what the gateway gave up waiting
                    // for (a frozen MinIO reads the request it was sent once
                    // it thaws): whole, or not at all.
                    assert!(
                        stored.is_none() || stored == Some((*size, expected.clone())),
                        "{case}: a failed upload left {stored:?}"
                    );
                } else {
                    assert_eq!(stored, None, "{case}: a failed upload left an object");
                }
            }
            _ => panic!("{case}: every upload gets an answer"),
        }
        // Sent while the store is known down: refused within 2 s.
        if *sent > detected + Duration::from_millis(100) && *sent < resumed {
            assert_eq!(*status, 503, "{case}");
            assert!(*ended - *sent <= Duration::from_secs(2) + slack, "{case}");
        }
        // In flight when the store went: failed within the stall timeout.
        if *sent < stopped && *status != 201 {
            assert!(
                *ended <= stopped + stall_timeout + Duration::from_secs(5) + slack,
                "{case}"
            );
        }
        // Sent 2 s after the store came back: stored.
        if *sent > resumed + Duration::from_secs(2) + slack {
            assert_eq!(*status, 201, "{case}");
        }
    }
    eprintln!("{outage:?} from {stopped:?} to {resumed:?}, seen at {detected:?}: {ok} stored, {failed} failed cleanly");
    assert!(ok > 30, "{ok}");
    // Aborts retried past the outage leave nothing behind.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open = open_uploads(&store).await;
        if open.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{outage:?}: multipart uploads left: {open:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    drop(gateway);
}

/// Readiness as a load balancer polls it: status, reason, and how long the
/// answer took.
async fn readyz(client: &reqwest::Client, gateway: &str) -> (u16, String, Duration) {
    let asked = Instant::now();
    match client
        .get(format!("{gateway}/readyz"))
        .timeout(Duration::from_secs(3))
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let json: serde_json::Value = response.json().await.unwrap_or_default();
            let reason = json["reason"].as_str().unwrap_or("").to_string();
            (status, reason, asked.elapsed())
        }
        Err(e) => (0, format!("transport: {e}"), asked.elapsed()),
    }
}

/// Issue 35: with the default settings, a frozen store hung a client for 30 to
/// 90 s and `/readyz` did not answer. The targets, MinIO frozen by SIGSTOP:
/// a single client's first 1 MiB PUT gets 503 within 10 s, later uploads within
/// 1 s, `/readyz` says `store_unreachable` within 10 s (answering at once all
/// along), and uploads succeed again within 2 s of SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_is_caught_with_the_default_settings() {
    let _turn = ONE_AT_A_TIME.lock().await;
    if common::minio_prefix("chaos-frozen").await.is_none() {
        return;
    }
    let mut outage_store = OutageStore::start(Outage::Frozen).await;
    outage_store.bucket("frozen").await;
    let endpoint = outage_store.gateway_endpoint();
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        "s3://frozen",
        "--endpoint",
        &endpoint,
    ]);
    let url = gateway.url.clone();
    let client = reqwest::Client::new();
    for i in 0..3 {
        let (status, code) = put(&client, &url, &format!("warm/{i}"), data(i, MIB)).await;
        assert_eq!(status, 201, "{code}");
    }
    assert_eq!(readyz(&client, &url).await.0, 200);

    outage_store.take_away();
    let frozen = Instant::now();
    // A load balancer's poll, every 100 ms.
    let polling = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut answers = Vec::new();
            while frozen.elapsed() < Duration::from_secs(12) {
                let (status, reason, took) = readyz(&client, &url).await;
                answers.push((frozen.elapsed(), status, reason, took));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answers
        }
    });
    let sent = Instant::now();
    let (first, code) = put(&client, &url, "first", data(10, MIB)).await;
    let first_took = sent.elapsed();
    assert_eq!((first, code.as_str()), (503, "store_unavailable"));
    assert!(
        first_took <= Duration::from_secs(10),
        "first PUT answered after {first_took:?}"
    );
    let sent = Instant::now();
    let (later, _) = put(&client, &url, "later", data(11, MIB)).await;
    let later_took = sent.elapsed();
    assert_eq!(later, 503);
    assert!(
        later_took <= Duration::from_secs(1),
        "a later PUT answered after {later_took:?}"
    );
    assert_eq!(metric(&client, &url, "sluice_store_down").await, 1.0);
    assert_eq!(
        metric(&client, &url, "sluice_store_outages_total").await,
        1.0
    );
    let answers = polling.await.unwrap();
    let slowest = answers.iter().map(|a| a.3).max().unwrap();
    // "At once": never waiting on the frozen store (a request to it hangs for
    // seconds). The bound leaves room for a loaded 2-core machine, where a
    // CI run saw one answer take 591 ms while the gateway was still healthy.
    assert!(
        slowest <= Duration::from_secs(2),
        "/readyz took {slowest:?}: {answers:?}"
    );
    let not_ready = answers
        .iter()
        .find(|a| a.1 == 503)
        .map(|a| (a.0, a.2.clone()))
        .expect("/readyz said 503 while frozen");
    assert!(not_ready.0 <= Duration::from_secs(10), "{answers:?}");
    assert_eq!(not_ready.1, "store_unreachable");
    assert!(
        answers.iter().all(|a| a.1 == 200 || a.1 == 503),
        "{answers:?}"
    );

    let outage_store = outage_store.give_back().await;
    let thawed = Instant::now();
    let mut tries = 0;
    let back = loop {
        tries += 1;
        let (status, _) = put(&client, &url, &format!("back/{tries}"), data(20, MIB)).await;
        if status == 201 {
            break thawed.elapsed();
        }
        assert!(
            thawed.elapsed() < Duration::from_secs(10),
            "not back: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        back <= Duration::from_secs(2),
        "uploads succeed again after {back:?}"
    );
    eprintln!(
        "frozen store, default settings: first PUT 503 after {first_took:?}, a later one after \
         {later_took:?}; /readyz 503 {} after the freeze, slowest answer {slowest:?}; \
         uploads back {back:?} after SIGCONT",
        humantime::format_duration(Duration::from_millis(not_ready.0.as_millis() as u64))
    );
    drop(gateway);
    drop(outage_store);
}

/// The other side of detection, with the default settings: a store that is
/// slow but alive is never taken for a dead one. Through the chaos proxy
/// holding back a fifth of the store's answers for 2 s, and under a storm of
/// 1,000 uploads at once, the breaker never opens and no upload fails for the
/// store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_and_a_storm_raise_no_false_alarm() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some((endpoint, prefix, _store)) = minio_prefix("chaos-no-alarm").await else {
        return;
    };
    let slow = ChaosConfig {
        faults: FaultRates {
            stall: 0.2,
            ..FaultRates::default()
        },
        stall_for: Duration::from_secs(2),
        write_rate_per_prefix: None,
        ..ChaosConfig::default()
    };
    let proxy = ChaosProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), &endpoint, slow)
        .await
        .unwrap();
    let gateway = serve_on_minio(&proxy.url(), &prefix, "127.0.0.1:0", &[]);
    let url = Arc::new(gateway.url.clone());
    let client = reqwest::Client::new();
    // 200 uploads, 16 at a time: 1 MiB, and every fourth 20 MiB (multipart).
    let started = Instant::now();
    let slow_answers: Vec<(u64, u16, String)> = futures::stream::iter(0..200u64)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let size = if i % 4 == 0 { 20 * MIB } else { MIB };
                let (status, code) = put(&client, &url, &format!("slow/{i}"), data(i, size)).await;
                (i, status, code)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let slow_took = started.elapsed();
    let held = proxy.stats().totals.stall;
    for (i, status, code) in &slow_answers {
        assert_eq!(*status, 201, "upload {i} through the slow store: {code}");
    }
    assert!(held >= 20, "the proxy held back {held} answers");
    assert_eq!(
        metric(&client, &url, "sluice_store_outages_total").await,
        0.0
    );

    // A storm: 1,000 uploads of 64 KiB at once, the store at full speed. The
    // gateway may turn some away (overloaded), never for the store.
    proxy
        .set_config(ChaosConfig {
            write_rate_per_prefix: None,
            ..ChaosConfig::default()
        })
        .unwrap();
    let started = Instant::now();
    let storm: Vec<(u16, String)> = futures::future::join_all((0..1000u64).map(|i| {
        let (client, url) = (client.clone(), url.clone());
        async move { put(&client, &url, &format!("storm/{i}"), data(i, 64 * KIB)).await }
    }))
    .await;
    let storm_took = started.elapsed();
    let stored = storm.iter().filter(|(status, _)| *status == 201).count();
    for (status, code) in &storm {
        assert!(
            *status == 201 || (*status == 503 && code == "overloaded"),
            "{status} {code}"
        );
    }
    assert!(stored >= 500, "{stored} of 1,000 stored");
    assert_eq!(
        metric(&client, &url, "sluice_store_outages_total").await,
        0.0
    );
    assert_eq!(metric(&client, &url, "sluice_store_down").await, 0.0);
    eprintln!(
        "no false alarm: 200 uploads with {held} answers held 2 s in {slow_took:?}; \
         a storm of 1,000 in {storm_took:?} ({stored} stored, the rest turned away); \
         breaker opened 0 times"
    );
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_gateway_is_killed_the_janitor_aborts_orphans_and_spares_live_tus_uploads() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some((endpoint, prefix, store)) = minio_prefix("chaos-janitor").await else {
        return;
    };
    let mut gateway = serve_on_minio(&endpoint, &prefix, "127.0.0.1:0", &[]);
    let client = reqwest::Client::new();
    // A tus upload of 32 MiB, 20 MiB of it sent: one part stored, state live.
    let tus_body = data(7, 32 * MIB);
    let created = client
        .post(format!("{}/v1/tus/", gateway.url))
        .header("tus-resumable", "1.0.0")
        .header("upload-length", tus_body.len())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let patched = client
        .patch(format!("{}{location}", gateway.url))
        .header("tus-resumable", "1.0.0")
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", 0)
        .body(tus_body.slice(..20 * MIB as usize))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 204);
    // A 64 MiB PUT that trickles: parts are stored when the gateway dies.
    let slow = futures::stream::iter(0..64u64).then(|i| async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        Ok::<_, std::io::Error>(data(100 + i, MIB))
    });
    let put_url = format!("{}/v1/objects/orphan", gateway.url);
    let trickle = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .put(put_url)
                .header("content-length", 64 * MIB)
                .body(reqwest::Body::wrap_stream(slow))
                .send()
                .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while open_uploads(&store).await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the PUT never started a multipart upload"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    assert!(
        trickle.await.unwrap().is_err(),
        "the PUT cannot have succeeded"
    );
    assert_eq!(open_uploads(&store).await.len(), 2);

    // A dry run changes nothing; a real one aborts the orphan only.
    let janitor = |extra: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["janitor", "--store"])
            .arg(format!(
                "s3://{}/{prefix}",
                sluice_testkit::minio::TEST_BUCKET
            ))
            .args(["--endpoint", &endpoint, "--older-than", "0s"])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    let dry = janitor(&["--dry-run"]);
    assert!(
        dry.contains("2 listed, 1 would abort, 1 kept for live resumable uploads"),
        "{dry}"
    );
    assert!(dry.contains("would abort orphan"), "{dry}");
    assert_eq!(open_uploads(&store).await.len(), 2);
    // MinIO has no AbortIncompleteMultipartUpload rules: a clear refusal.
    let lifecycle = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "janitor",
            "--dry-run",
            "--install-lifecycle",
            "1",
            "--store",
        ])
        .arg(format!(
            "s3://{}/{prefix}",
            sluice_testkit::minio::TEST_BUCKET
        ))
        .args(["--endpoint", &endpoint])
        .output()
        .unwrap();
    assert!(lifecycle.status.success());
    let lifecycle = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "janitor",
            "--older-than",
            "100d",
            "--install-lifecycle",
            "1",
            "--store",
        ])
        .arg(format!(
            "s3://{}/{prefix}",
            sluice_testkit::minio::TEST_BUCKET
        ))
        .args(["--endpoint", &endpoint])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&lifecycle.stderr);
    assert_eq!(lifecycle.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("does not support AbortIncompleteMultipartUpload lifecycle rules"),
        "{stderr}"
    );
    let real = janitor(&[]);
    assert!(
        real.contains("2 listed, 1 aborted, 1 kept for live resumable uploads"),
        "{real}"
    );
    let open = open_uploads(&store).await;
    assert_eq!(open.len(), 1);
    assert_ne!(open[0].key, "orphan");
    assert!(store
        .head_object("orphan")
        .await
        .unwrap_err()
        .is_not_found());

    // The tus upload resumes on a new gateway and completes.
    let gateway = serve_on_minio(&endpoint, &prefix, "127.0.0.1:0", &[]);
    let url = format!("{}{location}", gateway.url);
    let head = client
        .head(&url)
        .header("tus-resumable", "1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.headers()["upload-offset"],
        (20 * MIB).to_string().as_str()
    );
    let finished = client
        .patch(&url)
        .header("tus-resumable", "1.0.0")
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", 20 * MIB)
        .body(tus_body.slice(20 * MIB as usize..))
        .send()
        .await
        .unwrap();
    assert_eq!(finished.status(), 204);
    let key = finished.headers()["x-sluice-key"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        stored_crc(&store, &key).await,
        Some((32 * MIB, crc(&tus_body)))
    );
    assert!(open_uploads(&store).await.is_empty());
}
