//! deploy/ as an operator runs it (issue 35): three gateways on one MinIO bucket
//! behind haproxy with deploy/haproxy.cfg itself, driven by 200 resumable
//! uploads (tus-js-client, 5 MiB chunks) and 1,000 small PUTs while one gateway
//! is SIGKILLed and another drains on SIGTERM. Every upload completes byte-exact,
//! no multipart upload is left behind, and the drained gateway exits 0 inside
//! its grace. The gateways run with the default settings.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use sluice_store::ObjectStore;

mod common;

const MIB: usize = 1024 * 1024;
const TUS_UPLOADS: usize = 200;
const TUS_SIZE: usize = 6 * MIB;
const PUTS: usize = 1000;

/// File `i` as tests/clients/tus_js_many.mjs makes it.
fn tus_file(i: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..TUS_SIZE)
        .map(|j| ((j * 31 + (j >> 9)) & 255) as u8)
        .collect();
    data[..15].copy_from_slice(format!("upload-{i:08}").as_bytes());
    data
}

fn put_body(i: usize) -> Bytes {
    let size = 8 * 1024 * (1 + i % 8);
    let mut data: Vec<u8> = (0..size).map(|j| ((j * 17 + i) & 255) as u8).collect();
    data[..12].copy_from_slice(format!("put-{i:08}").as_bytes());
    Bytes::from(data)
}

/// A PUT as a client behind a load balancer makes it: a 5xx or a broken
/// connection (a gateway died under it) is tried again, a moment later.
async fn put_until_stored(client: &reqwest::Client, url: &str, body: Bytes) -> (u16, u32) {
    let mut tries = 0;
    loop {
        tries += 1;
        let status = match client.put(url).body(body.clone()).send().await {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        };
        if status == 201 || tries >= 40 {
            return (status, tries - 1);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_behind_haproxy_ride_out_a_kill_and_a_drain() {
    let Some(clients) = common::npm_clients("deploy") else {
        return;
    };
    let Some(haproxy) = common::haproxy_binary("deploy") else {
        return;
    };
    let Some((endpoint, prefix, store)) = common::minio_prefix("deploy").await else {
        return;
    };
    let mut gateways: Vec<Option<common::Gateway>> = (0..3)
        .map(|_| {
            Some(common::serve_on_minio(
                &endpoint,
                &prefix,
                "127.0.0.1:0",
                &[],
            ))
        })
        .collect();
    let address = |g: &Option<common::Gateway>| {
        g.as_ref()
            .unwrap()
            .url
            .trim_start_matches("http://")
            .to_string()
    };
    let lb_port = common::free_port();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/haproxy.cfg");
    let _haproxy = common::KillOnDrop::spawn(
        Command::new(&haproxy)
            .args(["-db", "-f", config])
            .env("SLUICE_LB_BIND", format!("127.0.0.1:{lb_port}"))
            .env("SLUICE_GATEWAY_1", address(&gateways[0]))
            .env("SLUICE_GATEWAY_2", address(&gateways[1]))
            .env("SLUICE_GATEWAY_3", address(&gateways[2]))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "haproxy",
    );
    let lb = format!("http://127.0.0.1:{lb_port}");
    let client = reqwest::Client::new();
    let up = Instant::now();
    loop {
        match client.get(format!("{lb}/readyz")).send().await {
            Ok(r) if r.status() == 200 => break,
            _ => {
                assert!(
                    up.elapsed() < Duration::from_secs(20),
                    "haproxy did not come up"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    let started = Instant::now();
    let tus = Command::new("node")
        .arg(format!("{clients}/tus_js_many.mjs"))
        .arg(format!("{lb}/v1/tus/"))
        .args([
            TUS_UPLOADS.to_string(),
            TUS_SIZE.to_string(),
            (5 * MIB).to_string(),
            "8".to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run tus_js_many.mjs");
    let tus = tokio::task::spawn_blocking(move || tus.wait_with_output().unwrap());
    let puts = tokio::spawn({
        let (client, lb) = (client.clone(), lb.clone());
        async move {
            futures::stream::iter(0..PUTS)
                .map(|i| {
                    let (client, url) = (client.clone(), format!("{lb}/v1/objects/put/{i}"));
                    async move { (i, put_until_stored(&client, &url, put_body(i)).await) }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        }
    });

    // One gateway dies, another is stopped as systemd stops it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut killed = gateways[0].take().unwrap();
    killed.child.kill().unwrap();
    let _ = killed.child.wait();
    let killed_at = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut drained = gateways[1].take().unwrap();
    assert!(Command::new("kill")
        .args(["-TERM", &drained.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let termed = Instant::now();
    let drained_at = started.elapsed();
    let drained_exit = tokio::task::spawn_blocking(move || {
        let status = drained.child.wait().unwrap();
        (status, termed.elapsed())
    });

    let output = tus.await.unwrap();
    let tus_took = started.elapsed();
    let puts = puts.await.unwrap();
    let puts_took = started.elapsed();
    let (status, exit_after) = drained_exit.await.unwrap();
    assert!(status.success(), "the drained gateway exited {status:?}");
    // drain_delay 5 s + shutdown_grace 30 s (the defaults), and the exit.
    assert!(
        exit_after <= Duration::from_secs(37),
        "exited {exit_after:?} after SIGTERM"
    );

    // Every resumable upload completed, byte-exact.
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(results.len(), TUS_UPLOADS);
    let mut tus_retries = 0;
    for result in &results {
        assert_eq!(result["ok"], true, "{result}");
        tus_retries += result["retries"].as_u64().unwrap();
        let i = result["i"].as_u64().unwrap() as usize;
        let key = result["key"].as_str().unwrap();
        assert!(
            common::object_bytes(&store, key).await == tus_file(i),
            "upload {i} at {key} differs"
        );
    }
    // Every PUT stored, byte-exact.
    let mut put_retries = 0;
    for (i, (status, retries)) in &puts {
        assert_eq!(*status, 201, "PUT {i} after {retries} retries");
        put_retries += retries;
        let stored = common::object_bytes(&store, &format!("put/{i}")).await;
        assert!(stored == put_body(*i), "PUT {i} differs");
    }
    // No multipart upload left behind (aborts of cut uploads may lag a moment).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = store.list_multipart_uploads("").await.unwrap();
        if open.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "multipart uploads left: {open:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let bytes = TUS_UPLOADS * TUS_SIZE + (0..PUTS).map(|i| put_body(i).len()).sum::<usize>();
    eprintln!(
        "haproxy + 3 gateways: gateway 1 SIGKILLed at {killed_at:?}, gateway 2 SIGTERMed at \
         {drained_at:?} (exit 0 after {exit_after:?}); {TUS_UPLOADS} tus uploads of 6 MiB done in \
         {tus_took:?} ({tus_retries} client retries), {PUTS} PUTs in {puts_took:?} ({put_retries} \
         retries); {:.0} MiB byte-exact, no multipart upload left",
        bytes as f64 / MIB as f64
    );
}
