//! What the command line stores with objects (content types guessed or
//! given, headers, metadata, storage class, ACL, server-side encryption) and
//! the bucket verbs (`mb`, `rb`, `ls` of buckets), against MinIO; the request
//! headers MinIO accepts but does not keep are checked on the wire.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sluice_store::{Encryption, ObjectMeta, ObjectStore};
use sluice_testkit::{minio, test_data};

fn sluice(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).env_remove("SLUICE_LOG");
    command
}

/// Runs sluice against `endpoint`.
fn run(endpoint: &str, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--endpoint", endpoint]);
    sluice(&all).output().expect("run sluice")
}

fn ok(endpoint: &str, args: &[&str]) -> String {
    let out = run(endpoint, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

async fn head(store: &dyn ObjectStore, key: &str) -> ObjectMeta {
    store
        .head_object(key)
        .await
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// `sync ./site s3://www/` stored index.html as application/octet-stream;
/// headers and metadata had no flags. Types are guessed from the extension
/// (or given), and every setting reaches the object, on the single-request
/// and the multipart path, for put, a directory and sync alike.
#[tokio::test(flavor = "multi_thread")]
async fn object_settings_reach_the_object() {
    let Some(endpoint) = minio::endpoint("object_settings") else {
        return;
    };
    // Made for its bucket; the test reads the whole bucket.
    minio::store("object_settings").await.unwrap();
    let mut config = sluice_store::s3::S3Config::new(minio::TEST_BUCKET);
    config.endpoint = Some(endpoint.clone());
    let store = sluice_store::s3::S3Store::connect(config).await;
    let prefix = minio::unique_prefix("objects");
    let url = |rest: &str| format!("s3://{}/{prefix}{rest}", minio::TEST_BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    for (name, data) in [
        ("index.html", &b"<p>hi</p>"[..]),
        ("css/style.css", b"p{}"),
        ("img/logo.png", b"\x89PNG"),
        ("data.unknownext", b"?"),
    ] {
        write(&site.join(name), data);
    }
    let site = site.to_str().unwrap();
    ok(
        &endpoint,
        &[
            "put",
            site,
            &url("put/"),
            "--quiet",
            "--metadata",
            "team=web",
        ],
    );
    ok(
        &endpoint,
        &[
            "sync",
            site,
            &url("sync/"),
            "--quiet",
            "--cache-control",
            "max-age=60",
        ],
    );
    // (key, content type, cache control)
    let cases = [
        ("put/index.html", "text/html", None),
        ("put/css/style.css", "text/css", None),
        ("put/img/logo.png", "image/png", None),
        ("put/data.unknownext", "application/octet-stream", None),
        ("sync/index.html", "text/html", Some("max-age=60")),
        ("sync/img/logo.png", "image/png", Some("max-age=60")),
    ];
    for (key, content_type, cache_control) in cases {
        let meta = head(&store, &format!("{prefix}{key}")).await;
        assert_eq!(meta.content_type.as_deref(), Some(content_type), "{key}");
        assert_eq!(
            meta.settings.cache_control.as_deref(),
            cache_control,
            "{key}"
        );
        if key.starts_with("put/") {
            assert_eq!(
                meta.metadata.get("team").map(String::as_str),
                Some("web"),
                "{key}"
            );
            assert!(
                meta.metadata.contains_key("mtime"),
                "{key}: the time is kept too"
            );
        }
    }

    // One file, every header, given type; then standard input, typed by its key.
    let page = dir.path().join("report.pdf");
    write(&page, b"%PDF-1.7");
    ok(
        &endpoint,
        &[
            "put",
            page.to_str().unwrap(),
            &url("one/report.bin"),
            "--quiet",
            "--content-type",
            "application/pdf",
            "--cache-control",
            "no-cache",
            "--content-disposition",
            "attachment; filename=\"report.pdf\"",
            "--content-encoding",
            "identity",
            "--metadata",
            "Owner=ann",
            "--metadata",
            "note=a=b",
        ],
    );
    let meta = head(&store, &format!("{prefix}one/report.bin")).await;
    assert_eq!(meta.content_type.as_deref(), Some("application/pdf"));
    assert_eq!(meta.settings.cache_control.as_deref(), Some("no-cache"));
    assert_eq!(
        meta.settings.content_disposition.as_deref(),
        Some("attachment; filename=\"report.pdf\"")
    );
    assert_eq!(meta.settings.content_encoding.as_deref(), Some("identity"));
    assert_eq!(meta.metadata.get("owner").map(String::as_str), Some("ann"));
    assert_eq!(meta.metadata.get("note").map(String::as_str), Some("a=b"));
    let mut child = sluice(&[
        "put",
        "-",
        &url("one/piped.json"),
        "--quiet",
        "--endpoint",
        &endpoint,
    ])
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    child.stdin.take().unwrap().write_all(b"{}").unwrap();
    assert!(child.wait().unwrap().success());
    let meta = head(&store, &format!("{prefix}one/piped.json")).await;
    assert_eq!(meta.content_type.as_deref(), Some("application/json"));

    // A multipart upload (two 8 MiB parts) carries its settings too.
    let big = dir.path().join("big.csv");
    write(&big, &test_data(9 * 1024 * 1024, 3));
    let mut args = vec![
        "put",
        big.to_str().unwrap(),
        "--quiet",
        "--storage-class",
        "reduced_redundancy",
        "--cache-control",
        "max-age=1",
    ];
    let big_url = url("big.csv");
    args.insert(2, &big_url);
    let kms = std::env::var("SLUICE_TEST_KMS_KEY").ok();
    if kms.is_some() {
        args.extend(["--sse", "AES256"]);
    }
    ok(&endpoint, &args);
    let meta = head(&store, &format!("{prefix}big.csv")).await;
    assert_eq!(meta.content_type.as_deref(), Some("text/csv"));
    assert_eq!(
        meta.settings.storage_class.as_deref(),
        Some("REDUCED_REDUNDANCY")
    );
    assert_eq!(meta.settings.cache_control.as_deref(), Some("max-age=1"));
    match &kms {
        Some(key) => {
            assert_eq!(meta.settings.encryption, Some(Encryption::S3Managed));
            // SSE-KMS with the MinIO's key, read back whole.
            let small = dir.path().join("secret.txt");
            write(&small, b"secret");
            let secret_url = url("secret.txt");
            ok(
                &endpoint,
                &[
                    "put",
                    small.to_str().unwrap(),
                    &secret_url,
                    "--quiet",
                    "--sse",
                    "aws:kms",
                    "--sse-kms-key-id",
                    key,
                ],
            );
            let meta = head(&store, &format!("{prefix}secret.txt")).await;
            assert!(
                matches!(&meta.settings.encryption, Some(Encryption::Kms { key_id: Some(id) }) if id.ends_with(key.as_str())),
                "{:?}",
                meta.settings.encryption
            );
            let back = dir.path().join("secret.back");
            ok(
                &endpoint,
                &["get", &secret_url, back.to_str().unwrap(), "--quiet"],
            );
            assert_eq!(std::fs::read(&back).unwrap(), b"secret");
        }
        None => eprintln!("SLUICE_TEST_KMS_KEY unset: server-side encryption not tried"),
    }

    // A copy inside the bucket takes a storage class (and encryption) asked
    // for, and keeps the source's type and headers, on CopyObject.
    let copy_url = url("copied.csv");
    let mut args = vec![
        "cp",
        &big_url,
        &copy_url,
        "--storage-class",
        "REDUCED_REDUNDANCY",
    ];
    if kms.is_some() {
        args.extend(["--sse", "AES256"]);
    }
    ok(&endpoint, &args);
    let meta = head(&store, &format!("{prefix}copied.csv")).await;
    assert_eq!(
        meta.settings.storage_class.as_deref(),
        Some("REDUCED_REDUNDANCY")
    );
    assert_eq!(meta.content_type.as_deref(), Some("text/csv"));
    assert_eq!(meta.settings.cache_control.as_deref(), Some("max-age=1"));
    if kms.is_some() {
        assert_eq!(meta.settings.encryption, Some(Encryption::S3Managed));
    }
    // Asked for nothing, a copy sends none: the store decides (AWS takes the
    // bucket's defaults; MinIO keeps the source's class), type and headers kept.
    let plain_url = url("plain-copy.csv");
    ok(&endpoint, &["cp", &big_url, &plain_url]);
    let meta = head(&store, &format!("{prefix}plain-copy.csv")).await;
    assert_eq!(meta.settings.cache_control.as_deref(), Some("max-age=1"));

    // Settings a target cannot keep, or that a copy would not apply, are
    // refused before anything is sent.
    let local = dir.path().join("local-store/x.txt");
    let (copy_url, put_url, r_url) = (url("refused.csv"), url("put/"), url("r.pdf"));
    let down = dir.path().join("down");
    let down = down.to_str().unwrap();
    // (arguments, what the error says)
    let refusals: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "put",
                site,
                local.to_str().unwrap(),
                "--storage-class",
                "STANDARD",
            ],
            "directory store",
        ),
        (
            vec!["cp", &big_url, &copy_url, "--content-type", "text/plain"],
            "apply to uploads",
        ),
        (
            vec!["sync", &put_url, down, "--cache-control", "x"],
            "not to downloaded files",
        ),
        (
            vec!["put", page.to_str().unwrap(), &r_url, "--acl", "world"],
            "expected one of private",
        ),
        (
            vec![
                "put",
                page.to_str().unwrap(),
                &r_url,
                "--metadata",
                "mtime=0",
            ],
            "modification time",
        ),
    ];
    for (args, says) in refusals {
        let out = run(&endpoint, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(store.head_object(&format!("{prefix}r.pdf")).await.is_err());
    assert!(store
        .head_object(&format!("{prefix}copy.csv"))
        .await
        .is_err());
    assert!(!local.exists());
}

/// MinIO takes a canned ACL, other storage classes and a KMS key id without
/// keeping (or with refusing) them: the request must still say them. A
/// listener that answers as S3 would records what sluice sends.
#[test]
fn the_requests_carry_what_minio_does_not_keep() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let recorder = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        // The head, then as much of the body as its content-length says.
        let complete = |request: &[u8]| {
            let text = String::from_utf8_lossy(request).to_ascii_lowercase();
            let Some(end) = text.find("\r\n\r\n") else {
                return false;
            };
            let length = text
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            request.len() >= end + 4 + length
        };
        while !complete(&request) {
            let n = socket.read(&mut buffer).unwrap();
            assert!(n > 0, "the request ended early");
            request.extend_from_slice(&buffer[..n]);
        }
        socket
            .write_all(b"HTTP/1.1 200 OK\r\nETag: \"0\"\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        String::from_utf8_lossy(&request).to_ascii_lowercase()
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"shaped").unwrap();
    let out = sluice(&[
        "put",
        file.to_str().unwrap(),
        "s3://shape/f.txt",
        "--endpoint",
        &endpoint,
        "--quiet",
        "--acl",
        "bucket-owner-full-control",
        "--storage-class",
        "GLACIER_IR",
        "--sse",
        "aws:kms",
        "--sse-kms-key-id",
        "alias/uploads",
    ])
    .env("AWS_ACCESS_KEY_ID", "shape")
    .env("AWS_SECRET_ACCESS_KEY", "shape-secret")
    .env("AWS_EC2_METADATA_DISABLED", "true")
    .output()
    .unwrap();
    let request = recorder.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for header in [
        "put /shape/f.txt",
        "x-amz-acl: bucket-owner-full-control",
        "x-amz-storage-class: glacier_ir",
        "x-amz-server-side-encryption: aws:kms",
        "x-amz-server-side-encryption-aws-kms-key-id: alias/uploads",
        "content-type: text/plain",
    ] {
        assert!(request.contains(header), "{header} not in:\n{request}");
    }
}

/// `mb`, `rb` and `ls` of buckets, as aws s3 has them; a directory store
/// is made and removed the same way.
#[test]
fn buckets_are_made_listed_and_removed() {
    let Some(endpoint) = minio::endpoint("buckets") else {
        return;
    };
    let bucket = format!("mb-{}", std::process::id());
    let url = format!("s3://{bucket}");
    assert_eq!(
        ok(&endpoint, &["mb", &url]).trim(),
        format!("made bucket {url}")
    );
    // (arguments, exit code, what stderr says)
    let refusals: [(&[&str], i32, &str); 3] = [
        (&["mb", &url], 1, "already exists (it is yours)"),
        (&["mb", "s3://Not_Valid"], 2, "is not valid"),
        (&["mb", &format!("{url}/key")], 2, "a bucket is s3://"),
    ];
    for (args, code, says) in refusals {
        let out = run(&endpoint, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    for listing in [vec!["ls"], vec!["ls", "s3://"]] {
        let out = ok(&endpoint, &listing);
        assert!(
            out.lines().any(|l| l.ends_with(&format!("  {url}"))),
            "{listing:?}: {out}"
        );
    }
    let json = ok(&endpoint, &["ls", "--json"]);
    assert!(json.contains(&format!("\"bucket\":\"{bucket}\"")), "{json}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"f").unwrap();
    ok(
        &endpoint,
        &[
            "put",
            file.to_str().unwrap(),
            &format!("{url}/a/f.txt"),
            "--quiet",
        ],
    );
    let out = run(&endpoint, &["rb", &url]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
    let dry = ok(&endpoint, &["rb", &url, "--force", "--dry-run"]);
    assert!(dry.contains("1 object and 0 unfinished uploads"), "{dry}");
    assert!(ok(&endpoint, &["ls"]).contains(&url));
    let removed = ok(&endpoint, &["rb", &url, "--force"]);
    assert!(
        removed.contains(&format!("removed bucket {url}")),
        "{removed}"
    );
    assert!(!ok(&endpoint, &["ls"]).contains(&format!("{url}\n")));

    // A directory store.
    let store = dir.path().join("store");
    let store_arg = store.to_str().unwrap();
    assert!(ok(&endpoint, &["mb", store_arg]).contains("made directory store"));
    assert!(store.join(".sluice").is_dir());
    ok(
        &endpoint,
        &[
            "put",
            file.to_str().unwrap(),
            &format!("{store_arg}/f.txt"),
            "--quiet",
        ],
    );
    let out = run(&endpoint, &["rb", store_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty (1 file)"));
    ok(&endpoint, &["rb", store_arg, "--force"]);
    assert!(!store.exists());
    // A plain directory is not a store to remove.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let out = run(&endpoint, &["rb", plain.to_str().unwrap(), "--force"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(plain.exists());
}
