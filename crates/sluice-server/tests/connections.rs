//! Hostile connections against a real listener on loopback: clients that send
//! nothing, half a protocol preface, too many connections or a trickle of body.
//! Each is cut off with an answer where one is possible, and a normal request
//! next to it is still served.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_server::{AppState, ServerConfig};
use sluice_testkit::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Gateway {
    address: std::net::SocketAddr,
    store: MemoryStore,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn gateway(tune: impl FnOnce(&mut ServerConfig)) -> Gateway {
    let mut config = ServerConfig::default();
    config.limits.header_read_timeout = Duration::from_secs(1);
    config.janitor.interval = Duration::ZERO;
    tune(&mut config);
    let store = MemoryStore::new();
    let state = AppState::new(config, Arc::new(store.clone())).unwrap();
    let listener = sluice_server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(sluice_server::serve(state, listener, async move {
        let _ = stopped.await;
    }));
    Gateway {
        address,
        store,
        _stop: stop,
    }
}

/// Sends `request` whole and reads the answer until the server closes.
async fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_to_close(&mut stream).await
}

async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer));
    match read.await {
        Ok(_) => String::from_utf8_lossy(&answer).into_owned(),
        Err(_) => panic!("the connection was not closed"),
    }
}

fn small_put(key: &str) -> Vec<u8> {
    format!("PUT /v1/objects/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        .into_bytes()
}

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
