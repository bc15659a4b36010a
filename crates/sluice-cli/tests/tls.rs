//! HTTPS end to end (issue 35): `sluice serve --tls-cert --tls-key` with a
//! certificate from a test CA, used by curl (HTTP/2 by ALPN), tus-js-client
//! under Node (trusting the CA through NODE_EXTRA_CA_CERTS) and the upload page
//! in headless Chromium (told to trust the server's key: Chromium reads roots
//! from an NSS database only, which a test cannot fill without certutil).

use std::process::Command;

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sluice_testkit::tls::TestCa;

mod common;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + (i >> 9)) as u8).collect()
}

#[test]
fn curl_tus_js_client_and_chromium_upload_over_https() {
    let Some(clients) = common::npm_clients("tls") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let ca = TestCa::new(work.path());
    let server = ca.issue("server");
    let store = work.path().join("store");
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--tls-cert",
        server.cert_file.to_str().unwrap(),
        "--tls-key",
        server.key_file.to_str().unwrap(),
    ]);
    assert!(gateway.url.starts_with("https://"), "{}", gateway.url);
    let ca_file = ca.root_file();

    // curl, HTTP/2 by ALPN, trusting the test CA.
    let file = work.path().join("curl.bin");
    std::fs::write(&file, data(3 * 1024 * 1024 + 5)).unwrap();
    let output = Command::new("curl")
        .args(["-sS", "--http2", "--cacert", ca_file.to_str().unwrap()])
        .args([
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            "-T",
        ])
        .arg(&file)
        .arg(format!("{}/v1/objects/curl.bin", gateway.url))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(said, "201 2", "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        std::fs::read(store.join("curl.bin")).unwrap(),
        std::fs::read(&file).unwrap()
    );
    // Without the CA, curl refuses the certificate: it is real TLS.
    let refused = Command::new("curl")
        .args(["-sS", "-o", "/dev/null"])
        .arg(format!("{}/readyz", gateway.url))
        .output()
        .unwrap();
    assert!(!refused.status.success());

    // tus-js-client, 1 MiB chunks.
    let file = work.path().join("tus.bin");
    std::fs::write(&file, data(5 * 1024 * 1024 + 7)).unwrap();
    let output = Command::new("node")
        .arg(format!("{clients}/tus_js_upload.mjs"))
        .arg(format!("{}/v1/tus/", gateway.url))
        .arg(&file)
        .arg((1024 * 1024).to_string())
        .env("NODE_EXTRA_CA_CERTS", &ca_file)
        .env("TUS_RETRY_DELAYS", "[]")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(
        last["event"],
        "success",
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let key = last["key"].as_str().unwrap();
    assert_eq!(
        std::fs::read(store.join(key)).unwrap(),
        std::fs::read(&file).unwrap()
    );

    // The upload page in Chromium, trusting the server's key.
    let spki = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(&server.spki_der));
    let size = 2 * 1024 * 1024 + 3;
    let output = Command::new("node")
        .arg(format!("{clients}/ui_check.mjs"))
        .args(["upload", &format!("{}/", gateway.url), &size.to_string()])
        .arg(work.path().join("tls-upload.png"))
        .env(
            "SLUICE_TEST_CHROMIUM_ARGS",
            format!("--ignore-certificate-errors-spki-list={spki}"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    let stored = std::fs::read(store.join(report["key"].as_str().unwrap())).unwrap();
    let sha: String = Sha256::digest(&stored)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, report["sha256"].as_str().unwrap());
}
