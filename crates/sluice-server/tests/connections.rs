//! Hostile connections against a real listener on loopback: clients that send
//! nothing, half a protocol preface, too many connections or a trickle of body.
//! Each is cut off with an answer where one is possible, and a normal request
//! next to it is still served.

mod support;

use std::time::{Duration, Instant};

use sluice_store::ObjectStore;
use support::{exchange, gateway, metric, read_to_close, small_put, trickle, tus_create};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn connections_without_a_request_are_closed_in_time() {
    let gateway = gateway(|_| {}).await;
    // (what the client sends, then holds the connection)
    let cases: [(&str, &[u8]); 4] = [
        ("nothing", b""),
        ("half an HTTP/2 preface", b"PRI * HTTP/2.0\r\n"),
        ("one byte of a request line", b"P"),
        (
            "half a header",
            b"PUT /v1/objects/a HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        ),
    ];
    for (what, sent) in cases {
        let started = Instant::now();
        let mut stream = TcpStream::connect(gateway.address).await.unwrap();
        stream.write_all(sent).await.unwrap();
        let _ = read_to_close(&mut stream).await;
        let held = started.elapsed();
        assert!(held < Duration::from_secs(3), "{what}: held {held:?}");
    }
    // A normal request is served after all that.
    let answer = exchange(gateway.address, &small_put("after")).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let gateway = gateway(|_| {}).await;
    let mut stream = TcpStream::connect(gateway.address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn connections_beyond_the_limit_get_503_and_the_rest_are_served() {
    let gateway = gateway(|config| {
        config.limits.max_connections = 2;
        config.limits.header_read_timeout = Duration::from_secs(5);
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(gateway.address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = exchange(gateway.address, &small_put("refused")).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("Retry-After: 1"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    assert!(gateway.store.object("refused").is_none());
    drop(held);
    // Slots come back as the held connections close.
    let mut answer = String::new();
    for _ in 0..50 {
        answer = exchange(gateway.address, &small_put("served")).await;
        if answer.starts_with("HTTP/1.1 201") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

/// Seam bug (hostile clients): a client trickling its body one byte at a time
/// was never cut off, however slow, as long as no pause reached the idle timeout.
#[tokio::test]
async fn a_trickled_body_is_cut_off_by_rate_and_others_go_on() {
    let gateway = gateway(|config| {
        config.limits.min_body_rate = 1024;
        config.limits.min_body_rate_grace = Duration::from_secs(1);
        config.limits.header_read_timeout = Duration::from_secs(10);
    })
    .await;
    let mut trickler = TcpStream::connect(gateway.address).await.unwrap();
    trickler
        .write_all(b"PUT /v1/objects/hog HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        let (mut reader, mut writer) = trickler.into_split();
        let writing = tokio::spawn(async move {
            for _ in 0..100 {
                if writer.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), reader.read_to_end(&mut answer)).await;
        writing.abort();
        String::from_utf8_lossy(&answer).into_owned()
    });
    let answer = exchange(gateway.address, &small_put("beside")).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let answer = trickle.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_too_slow"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(gateway.store.object("hog").is_none());
}

/// Issue 13: a trickling client with a huge Content-Length reserved a whole part
/// (the whole budget, at 2.5 TB) before its bytes arrived, and the budget served
/// waiters in order, so a 1 KiB PUT beside it got no answer. Memory is now taken
/// as bytes arrive: each trickler holds its 5 MiB floor at most.
#[tokio::test]
async fn tricklers_hold_little_memory_and_a_small_put_beside_them_is_answered() {
    let gateway = gateway(|config| {
        config.engine.memory_limit = 64 << 20;
        config.limits.header_read_timeout = Duration::from_secs(10);
    })
    .await;
    let length = 200u64 << 30; // parts of 21 MiB, within one upload's 32 MiB share
    let location = tus_create(gateway.address, length).await;
    let tricklers = [
        trickle(
            gateway.address,
            format!("PUT /v1/objects/known HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"),
            b"x",
        )
        .await,
        trickle(
            gateway.address,
            "PUT /v1/objects/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            b"1\r\nx\r\n",
        )
        .await,
        trickle(
            gateway.address,
            format!("PATCH {location} HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: {length}\r\n\r\n"),
            b"x",
        )
        .await,
    ];
    tokio::time::sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        exchange(gateway.address, &small_put("beside")),
    )
    .await
    .expect("the small PUT is answered while the tricklers trickle");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let in_use = metric(gateway.address, "sluice_memory_budget_in_use_bytes").await;
    assert!(
        in_use <= (15u64 << 20) as f64,
        "three tricklers hold {in_use} bytes of the budget"
    );
    for trickler in tricklers {
        trickler.abort();
    }
}

/// An upload whose parts would have to be larger than one upload's memory share
/// is refused before any byte is read, with 413 (it could never be buffered).
#[tokio::test]
async fn an_upload_needing_parts_beyond_its_share_is_refused_at_once() {
    let gateway = gateway(|config| config.engine.memory_limit = 64 << 20).await;
    let length = 2_684_354_560_000u64; // 2.5 TB: parts of 256 MiB
    let answer = exchange(
        gateway.address,
        format!("PUT /v1/objects/hog HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let answer = exchange(
        gateway.address,
        format!("POST /v1/tus/ HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(gateway.store.object("hog"), None);
}

/// A reader that stops reading a GET body is cut off at the download deadline
/// (the connection closes, though the gateway's writes are blocked), and a
/// request beside it is served.
#[tokio::test]
async fn a_stalled_download_is_cut_at_the_deadline() {
    let gateway = gateway(|c| c.limits.download_deadline = Some(Duration::from_secs(1))).await;
    let size = 64 * 1024 * 1024;
    gateway
        .store
        .put_object(sluice_store::PutRequest::new(
            "big",
            bytes::Bytes::from(vec![7u8; size]),
        ))
        .await
        .unwrap();
    let mut reader = TcpStream::connect(gateway.address).await.unwrap();
    reader
        .write_all(b"GET /v1/objects/big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1024];
    let _ = reader.read(&mut first).await.unwrap();
    // The reader stalls past the deadline; a small upload is served meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(exchange(gateway.address, &small_put("beside"))
        .await
        .starts_with("HTTP/1.1 201"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // What was in flight still arrives, then the connection ends short.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut rest)).await;
    let received = match read.expect("the stalled download was not cut") {
        Ok(_) => rest.len(),
        Err(_) => rest.len(), // a reset is a cut too
    };
    assert!(received < size / 2, "{received} bytes arrived: not cut");
}
