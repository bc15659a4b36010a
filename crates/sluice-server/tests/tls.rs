//! HTTPS on the listener (issue 35): a certificate from a test CA, HTTP/2 and
//! HTTP/1.1 by ALPN, a rotated certificate picked up without a restart, and
//! clear errors for a pair that cannot be used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use sluice_server::{AppState, ServerConfig};
use sluice_testkit::tls::TestCa;
use sluice_testkit::MemoryStore;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn config_with(cert: &std::path::Path, key: &std::path::Path) -> ServerConfig {
    let mut config = ServerConfig::default();
    config.tls.cert_file = Some(cert.to_path_buf());
    config.tls.key_file = Some(key.to_path_buf());
    config.janitor.interval = Duration::ZERO;
    config
}

/// (protocols a client offers, the one agreed)
type AlpnCase = (&'static [&'static [u8]], Option<&'static [u8]>);

/// A client trusting only the test CA, offering `alpn`.
fn connector(ca: &TestCa, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let pem = ca.root_pem();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
        let cert: CertificateDer<'static> = cert.unwrap();
        roots.add(cert).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// Connects and shakes hands: the protocol agreed and the certificate sent.
async fn handshake(
    address: std::net::SocketAddr,
    connector: &TlsConnector,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(address).await.unwrap();
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

#[test]
fn the_expiry_is_read_from_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    // (valid until, how X.509 writes it)
    let cases = [((2031, 5, 6), "UTCTime"), ((2061, 1, 2), "GeneralizedTime")];
    for ((year, month, day), form) in cases {
        let issued = ca.issue_until("dated", Some((year, month, day)));
        let date = time::Date::from_calendar_date(year, time::Month::try_from(month).unwrap(), day)
            .unwrap();
        let want = std::time::UNIX_EPOCH
            + Duration::from_secs(date.midnight().assume_utc().unix_timestamp() as u64);
        assert_eq!(
            sluice_server::tls::not_after(&issued.der),
            Some(want),
            "{form}"
        );
    }
    assert_eq!(sluice_server::tls::not_after(b"\x30\x03\x02\x01"), None);
}

#[tokio::test]
async fn a_pair_that_cannot_be_used_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let one = ca.issue("one");
    let two = ca.issue("two");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    // (what, cert, key, the error says)
    let cases = [
        (
            "a certificate without a key",
            Some(&one.cert_file),
            None,
            "go together",
        ),
        (
            "a key without a certificate",
            None,
            Some(&one.key_file),
            "go together",
        ),
        (
            "no such file",
            Some(&missing),
            Some(&one.key_file),
            "missing.pem",
        ),
        (
            "not PEM",
            Some(&garbage),
            Some(&one.key_file),
            "holds no PEM certificate",
        ),
        (
            "not a key",
            Some(&one.cert_file),
            Some(&garbage),
            "holds no PEM private key",
        ),
        (
            "another certificate's key",
            Some(&one.cert_file),
            Some(&two.key_file),
            "does not fit",
        ),
    ];
    for (what, cert, key, says) in cases {
        let mut config = ServerConfig::default();
        config.tls.cert_file = cert.cloned();
        config.tls.key_file = key.cloned();
        let error = AppState::new(config, Arc::new(MemoryStore::new()))
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"))
            .to_string();
        assert!(error.contains(says), "{what}: {error}");
    }
}

#[tokio::test]
async fn https_with_h2_by_alpn_and_a_rotated_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let first = ca.issue("server");
    let state = AppState::new(
        config_with(&first.cert_file, &first.key_file),
        Arc::new(MemoryStore::new()),
    )
    .unwrap();
    let listener = sluice_server::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(sluice_server::serve(state, listener, async move {
        let _ = stopped.await;
    }));

    // (what the client offers, what is agreed)
    let cases: [AlpnCase; 3] = [
        (&[b"h2", b"http/1.1"], Some(b"h2")),
        (&[b"http/1.1"], Some(b"http/1.1")),
        (&[], None),
    ];
    for (offered, agreed) in cases {
        let stream = handshake(address, &connector(&ca, offered)).await;
        assert_eq!(stream.get_ref().1.alpn_protocol(), agreed, "{offered:?}");
        let sent = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        assert_eq!(sent, first.der);
    }

    // HTTP/2 over TLS: an upload and its download.
    let stream = handshake(address, &connector(&ca, &[b"h2"])).await;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let put = http::Request::put("https://localhost/v1/objects/over-h2")
        .body(Full::new(Bytes::from_static(b"secret bytes")))
        .unwrap();
    let answer = sender.send_request(put).await.unwrap();
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.version(), http::Version::HTTP_2);
    let get = http::Request::get("https://localhost/v1/objects/over-h2")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = sender.send_request(get).await.unwrap();
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"secret bytes");

    // The certificate's expiry is a metric (alerted on in deploy/).
    let metrics = http::Request::get("https://localhost/metrics")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = sender.send_request(metrics).await.unwrap();
    let text = answer.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    let expiry: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("sluice_tls_certificate_expiry_timestamp_seconds "))
        .expect("the expiry metric")
        .parse()
        .unwrap();
    let want = sluice_server::tls::not_after(&first.der).unwrap();
    assert_eq!(
        expiry,
        want.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );

    // Plain HTTP on the TLS port gets no answer.
    let mut plain = TcpStream::connect(address).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut plain, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut answer),
    )
    .await;
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "answered in plain text"
    );

    // Rotation: new files in place; the next handshakes get the new certificate.
    tokio::time::sleep(Duration::from_millis(1100)).await; // a newer mtime
    let second = ca.issue("server");
    assert_ne!(second.der, first.der);
    let rotated = Instant::now();
    loop {
        let stream = handshake(address, &connector(&ca, &[b"h2"])).await;
        let sent = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        if sent == second.der {
            break;
        }
        assert!(
            rotated.elapsed() < Duration::from_secs(6),
            "still the old certificate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The connection opened before goes on with its certificate.
    let get = http::Request::get("https://localhost/readyz")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(sender.send_request(get).await.unwrap().status(), 200);

    // A half-written rotation keeps the certificate in use.
    std::fs::write(&second.cert_file, "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stream = handshake(address, &connector(&ca, &[b"h2"])).await;
    let sent = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    assert_eq!(sent, second.der);
}
