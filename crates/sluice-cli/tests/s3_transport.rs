//! sluice's own HTTP transport for S3 (sluice-store's s3/transport.rs) over
//! HTTPS: MinIO behind haproxy terminating TLS with a certificate from a test
//! CA. With the CA in `SSL_CERT_FILE` (or a directory of `SSL_CERT_DIR`), as
//! with curl and s5cmd, a multipart put, a ranged get and a listing go through; without it the store is refused
//! with the certificate named, and nothing is stored. And through a forward
//! proxy named by the environment (proxy.py, installed by scripts/test.sh),
//! with its user and password.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_store::ObjectStore;
use sluice_testkit::tls::TestCa;
use sluice_testkit::{minio, test_data};

mod common;

const MIB: usize = 1024 * 1024;

/// The proxy variables sluice reads, all of them unset but those given.
const PROXY_VARIABLES: [&str; 8] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

fn sluice_with(endpoint: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(args)
        .args(["--endpoint", endpoint])
        .env_remove("SLUICE_LOG")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR");
    for name in PROXY_VARIABLES {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("run sluice")
}

fn sluice(endpoint: &str, trusted: &Path, args: &[&str]) -> Output {
    sluice_with(
        endpoint,
        &[("SSL_CERT_FILE", trusted.to_str().unwrap())],
        args,
    )
}

/// `sluice put FILE BASE+NAME` and `sluice get` of it back, both with `env`;
/// the bytes must come back as they were.
fn round_trip(endpoint: &str, env: &[(&str, &str)], file: &Path, key: &str) {
    let put = sluice_with(
        endpoint,
        env,
        &["put", file.to_str().unwrap(), key, "--quiet"],
    );
    assert!(
        put.status.success(),
        "put: {}",
        String::from_utf8_lossy(&put.stderr)
    );
    let back = file.with_extension("back");
    let get = sluice_with(
        endpoint,
        env,
        &["get", key, back.to_str().unwrap(), "--quiet"],
    );
    assert!(
        get.status.success(),
        "get: {}",
        String::from_utf8_lossy(&get.stderr)
    );
    assert!(
        std::fs::read(&back).unwrap() == std::fs::read(file).unwrap(),
        "{key} came back different"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_and_ls_over_https_trust_ssl_cert_file_and_refuse_an_unknown_ca() {
    let Some((endpoint, prefix, store)) = common::minio_prefix("s3_transport").await else {
        return;
    };
    let Some(haproxy) = common::haproxy_binary("s3_transport") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let ca = TestCa::new(work.path());
    let server = ca.issue("minio-front");
    // haproxy wants the certificate and its key in one file.
    let bundle = work.path().join("front.pem");
    std::fs::write(
        &bundle,
        [
            std::fs::read(&server.cert_file).unwrap(),
            std::fs::read(&server.key_file).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    let port = common::free_port();
    let minio = endpoint.trim_start_matches("http://");
    let config = work.path().join("haproxy.cfg");
    std::fs::write(
        &config,
        format!(
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend tls\n  bind 127.0.0.1:{port} ssl crt {}\n  default_backend minio\n\
             backend minio\n  server minio {minio}\n",
            bundle.display()
        ),
    )
    .unwrap();
    let _front = common::KillOnDrop::spawn(
        Command::new(&haproxy)
            .args(["-db", "-f", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "haproxy",
    );
    wait_for_port(port, "haproxy").await;
    let https = format!("https://localhost:{port}");
    let base = format!("s3://{}/{prefix}", minio::TEST_BUCKET);

    // Trusted: 21 MiB is a multipart put (8 MiB parts) and a ranged get.
    let file = work.path().join("big.bin");
    std::fs::write(&file, test_data(21 * MIB + 5, 51)).unwrap();
    let trusted = ca.root_file();
    let trusting = [("SSL_CERT_FILE", trusted.to_str().unwrap())];
    round_trip(&https, &trusting, &file, &format!("{base}big.bin"));
    // SSL_CERT_DIR: a directory holding the CA (and no SSL_CERT_FILE).
    let roots = work.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    std::fs::copy(&trusted, roots.join("test-ca.pem")).unwrap();
    let listed = sluice_with(
        &https,
        &[("SSL_CERT_DIR", roots.to_str().unwrap())],
        &["ls", &base],
    );
    assert!(
        listed.status.success(),
        "SSL_CERT_DIR: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let ls = sluice(&https, &trusted, &["ls", &base]);
    assert!(
        ls.status.success(),
        "ls: {}",
        String::from_utf8_lossy(&ls.stderr)
    );
    assert!(String::from_utf8_lossy(&ls.stdout).contains("big.bin"));

    // Another CA's root: refused, the certificate named, nothing stored.
    let other = tempfile::tempdir().unwrap();
    let untrusted = TestCa::new(other.path()).root_file();
    let key = format!("{base}refused.bin");
    let refused = sluice(
        &https,
        &untrusted,
        &["put", file.to_str().unwrap(), &key, "--quiet"],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "an unknown CA was trusted");
    assert!(said.contains("invalid peer certificate"), "{said}");
    assert_nothing_at(&store, "refused.bin").await;
}

/// `HTTP_PROXY` with a user and password: put and get go through proxy.py by
/// CONNECT tunnels. A wrong password is refused with the proxy named (its
/// password not shown) and nothing stored; `NO_PROXY` goes past a proxy that
/// is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_proxy_from_the_environment_carries_the_requests() {
    let Some((endpoint, prefix, store)) = common::minio_prefix("s3_proxy").await else {
        return;
    };
    let Some((_, python)) = common::python_readers("s3_proxy") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let log = work.path().join("proxy.log");
    let _proxy = common::KillOnDrop::spawn(
        Command::new(&python)
            .args(["-m", "proxy", "--hostname", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--basic-auth", "sluice:proxy-secret-31"])
            .args(["--num-workers", "1", "--num-acceptors", "1"])
            .args(["--log-level", "INFO", "--log-file"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "proxy.py",
    );
    wait_for_port(port, "proxy.py").await;
    let base = format!("s3://{}/{prefix}", minio::TEST_BUCKET);
    let file = work.path().join("proxied.bin");
    std::fs::write(&file, test_data(9 * MIB + 3, 52)).unwrap();
    let through = format!("http://sluice:proxy-secret-31@127.0.0.1:{port}");
    round_trip(
        &endpoint,
        &[("HTTP_PROXY", &through)],
        &file,
        &format!("{base}proxied.bin"),
    );
    let minio = endpoint.trim_start_matches("http://");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains(&format!("CONNECT {minio}")),
        "proxy.py saw no tunnel to {minio}:\n{logged}"
    );

    // A wrong password.
    let wrong = format!("http://sluice:not-the-secret-9c@127.0.0.1:{port}");
    let key = format!("{base}refused.bin");
    let refused = sluice_with(
        &endpoint,
        &[("HTTP_PROXY", &wrong)],
        &["put", file.to_str().unwrap(), &key, "--quiet"],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a wrong proxy password was let through"
    );
    let named = format!("the proxy http://127.0.0.1:{port} wants a user and password");
    assert!(said.contains(&named), "{said}");
    assert!(
        !said.contains("not-the-secret-9c"),
        "the password was shown: {said}"
    );
    assert_nothing_at(&store, "refused.bin").await;

    // NO_PROXY: straight to the store, past a proxy that is not there.
    let host = minio.split(':').next().unwrap();
    let past = sluice_with(
        &endpoint,
        &[("HTTP_PROXY", "http://127.0.0.1:9"), ("NO_PROXY", host)],
        &["ls", &base],
    );
    assert!(
        past.status.success(),
        "ls: {}",
        String::from_utf8_lossy(&past.stderr)
    );
    assert!(String::from_utf8_lossy(&past.stdout).contains("proxied.bin"));
}

async fn wait_for_port(port: u16, what: &str) {
    let up = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "{what} did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn assert_nothing_at(store: &sluice_store::s3::S3Store, key: &str) {
    assert!(matches!(
        store.head_object(key).await,
        Err(sluice_store::StoreError::NoSuchKey { .. })
    ));
}
