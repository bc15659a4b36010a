//! A gateway on a loopback listener over a memory store, and raw-socket helpers
//! for tests that speak HTTP/1.1 byte by byte (hostile clients cannot be written
//! with a well-behaved HTTP client); [`oneshot`] for tests without a socket.

#![allow(dead_code)] // each test file uses its own subset

pub mod oneshot;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_server::{AppState, ServerConfig};
use sluice_testkit::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Gateway {
    pub address: SocketAddr,
    pub store: MemoryStore,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A gateway with a 1 s header-read timeout and no janitor, tuned by `tune`.
pub async fn gateway(tune: impl FnOnce(&mut ServerConfig)) -> Gateway {
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
pub async fn exchange(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_to_close(&mut stream).await
}

/// A connection to `address` from the loopback address `local` (127.0.0.0/8
/// is all loopback on Linux), as another client host.
pub async fn connect_from(local: std::net::IpAddr, address: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(local, 0)).unwrap();
    socket.connect(address).await.unwrap()
}

/// [`exchange`] from the loopback address `local`.
pub async fn exchange_from(local: std::net::IpAddr, address: SocketAddr, request: &[u8]) -> String {
    let mut stream = connect_from(local, address).await;
    stream.write_all(request).await.unwrap();
    read_to_close(&mut stream).await
}

/// Everything the server sends until it closes; panics after 20 s.
pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer));
    match read.await {
        // A reset after an answer still leaves the answer read so far.
        Ok(_) => String::from_utf8_lossy(&answer).into_owned(),
        Err(_) => panic!("the connection was not closed"),
    }
}

/// A 5-byte PUT of `key` that closes the connection after the answer.
pub fn small_put(key: &str) -> Vec<u8> {
    format!("PUT /v1/objects/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        .into_bytes()
}

/// A 1 KiB PUT of `key` that closes the connection after the answer.
pub fn kib_put(key: &str) -> Vec<u8> {
    let mut request = format!(
        "PUT /v1/objects/{key} HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(&[b'k'; 1024]);
    request
}

/// Creates a tus upload of `length` bytes and returns its path.
pub async fn tus_create(address: SocketAddr, length: u64) -> String {
    let created = exchange(
        address,
        format!("POST /v1/tus/ HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nUpload-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(created.starts_with("HTTP/1.1 201"), "{created}");
    created
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("location")
                .then(|| value.trim().to_owned())
        })
        .expect("a Location")
}

/// A connection that sends `head`, then `byte` every 200 ms until dropped.
pub async fn trickle(
    address: SocketAddr,
    head: String,
    byte: &'static [u8],
) -> tokio::task::JoinHandle<()> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::spawn(async move {
        for _ in 0..100 {
            if stream.write_all(byte).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The value of `metric` on the gateway's /metrics.
pub async fn metric(address: SocketAddr, metric: &str) -> f64 {
    let answer = exchange(
        address,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    answer
        .lines()
        .find_map(|line| line.strip_prefix(metric)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {metric} in {answer}"))
}
