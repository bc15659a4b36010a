//! End-to-end tests of the built `sluice` binary: round trips through the local
//! directory store and MinIO, standard input and output, exit codes, and Ctrl-C
//! in the middle of a multipart upload.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sluice_store::ObjectStore;
use sluice_testkit::{minio, test_data};

mod common;

fn sluice(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).env_remove("SLUICE_LOG");
    command
}

fn run(args: &[&str]) -> Output {
    sluice(args).output().expect("run sluice")
}

fn write_file(path: &Path, data: &[u8]) {
    std::fs::File::create(path)
        .unwrap()
        .write_all(data)
        .unwrap();
}

#[test]
fn put_and_get_through_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(20 * 1024 * 1024 + 3, 1);
    let src = dir.path().join("src.bin");
    write_file(&src, &data);
    let dest = dir.path().join("store/nested/obj.bin");
    let out = run(&["put", src.to_str().unwrap(), dest.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.starts_with("uploaded 20.00 MiB to"), "{summary}");
    assert!(
        summary.contains("2 parts") && summary.contains("MiB/s") && summary.contains("crc32c:"),
        "{summary}"
    );
    assert_eq!(std::fs::read(&dest).unwrap(), data);

    let back = dir.path().join("back.bin");
    let out = run(&["get", dest.to_str().unwrap(), back.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(verified)"));
    assert_eq!(std::fs::read(&back).unwrap(), data);
}

#[test]
fn standard_input_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(17 * 1024 * 1024, 2);
    let dest = dir.path().join("piped.bin");
    let mut child = sluice(&["put", "-", dest.to_str().unwrap(), "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let out = run(&["get", dest.to_str().unwrap(), "-"]);
    assert!(out.status.success());
    assert!(
        out.stdout == data,
        "standard output must carry exactly the object"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("downloaded"));
}

#[test]
fn usage_errors_exit_with_2_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    write_file(&src, b"hello");
    let store = dir.path().join("store");
    let dest = store.join("x");
    let (src, dest) = (src.to_str().unwrap(), dest.to_str().unwrap());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["put"], "required"),
        (vec!["frobnicate"], "unrecognized subcommand"),
        (
            vec!["put", src, dest, "--part-size", "1MiB"],
            "must be at least 5.00 MiB",
        ),
        (vec!["put", src, dest, "--part-size", "lots"], "not a size"),
        (
            vec!["put", src, dest, "--concurrency", "0"],
            "expected `auto` or a number in 1..=1024",
        ),
        (
            vec!["put", src, dest, "--concurrency", "fast"],
            "expected `auto` or a number in 1..=1024",
        ),
        (
            vec!["put", src, dest, "--memory-limit", "8MiB"],
            "memory limit",
        ),
        (
            vec!["put", src, dest, "--checksum-algorithm", "md5"],
            "invalid value",
        ),
        (vec!["put", "-", "s3://bucket/"], "names no key"),
        (vec!["put", src, "wasb://bucket/key"], "unsupported scheme"),
        (vec!["get", "s3://bucket", "-"], "is a prefix"),
        (
            vec!["serve", "--listen", "0.0.0.0:0", "--store", dest],
            "--allow-anonymous",
        ),
        (
            vec!["serve", "--store", dest, "--jwt-secret-file", src],
            "auth.jwt_secret_file",
        ),
        (vec!["serve", "--store", dest, "--direct"], "bucket store"),
        (
            vec![
                "serve",
                "--store",
                "s3://bucket-b",
                "--direct",
                "--direct-expires",
                "8d",
            ],
            "7 days",
        ),
        (
            vec![
                "serve",
                "--store",
                dest,
                "--jwt-secret-file",
                "/nonexistent",
            ],
            "cannot read /nonexistent",
        ),
        (
            vec!["sign", "--url-secret-file", src, "--key", "k"],
            "at least 32 bytes",
        ),
        (
            vec!["sign", "--url-secret-file", "/nonexistent", "--key", "k"],
            "cannot read /nonexistent",
        ),
    ];
    for (args, message) in cases {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(!store.join("x").exists());
    // A failure that is not a usage error exits with 1.
    let out = run(&["get", store.join("missing").to_str().unwrap(), "out"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no object at key"));
}

/// Issue 36, point 2: `put f s3:/media/x.html` "uploaded" into a local
/// directory `./s3:/media/`, and `serve --store s3:/uploads` served one. A
/// mistyped S3 URL is refused with what was meant, and nothing is made.
#[test]
fn a_mistyped_s3_url_is_refused_and_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_file(&dir.path().join("f.html"), b"<p>hi</p>");
    // (arguments, what the error suggests)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["put", "f.html", "s3:/media/x.html"],
            "s3://media/x.html",
        ),
        (
            vec!["put", "f.html", "s3//media/x.html"],
            "s3://media/x.html",
        ),
        (
            vec!["cp", "f.html", "S3://media/x.html"],
            "s3://media/x.html",
        ),
        (vec!["ls", "s3:/media/"], "s3://media/"),
        (vec!["serve", "--store", "s3:/uploads"], "s3://uploads"),
    ];
    for (args, meant) in cases {
        let mut child = sluice(&args)
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > std::time::Duration::from_secs(10) {
                let _ = child.kill();
                panic!("{args:?}: still running (took the URL for a local path)");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("mistyped S3 URL") && stderr.contains(meant),
            "{args:?}: {stderr}"
        );
    }
    let made: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(made, vec![std::ffi::OsString::from("f.html")]);
}

/// Issue 36, point 6: `get KEY ./newdir/` failed with "Not a directory (os
/// error 20)" and `get KEY ./a/b/f.html` with "No such file or directory",
/// naming no path; `get PREFIX` without the `/` said "no object at key" with
/// no hint. Directories are made as for prefixes; errors name the path.
#[test]
fn get_makes_the_directories_it_needs_and_hints_at_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("www")).unwrap();
    std::fs::create_dir_all(store.join("media/photos")).unwrap();
    write_file(&store.join("www/index.html"), b"<p>index</p>");
    write_file(&store.join("media/photos/a.jpg"), b"jpeg");
    let index = store.join("www/index.html");
    let index = index.to_str().unwrap();
    let out = dir.path().join("out");
    // (destination given, where the file must land)
    let cases = [
        (
            format!("{}/newdir/", out.display()),
            out.join("newdir/index.html"),
        ),
        (
            format!("{}/a/b/f.html", out.display()),
            out.join("a/b/f.html"),
        ),
    ];
    for (dest, lands) in cases {
        let output = run(&["get", index, &dest]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{dest}: {stderr}");
        assert_eq!(std::fs::read(&lands).unwrap(), b"<p>index</p>", "{dest}");
    }
    // A destination that cannot be made is named.
    write_file(&out.join("plain"), b"a file");
    let blocked = format!("{}/plain/sub/f.html", out.display());
    let output = run(&["get", index, &blocked]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}/plain", out.display())),
        "{stderr}"
    );
    // A prefix named without its `/`.
    let photos = store.join("media/photos");
    let output = run(&["get", photos.to_str().unwrap(), out.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("trailing /"), "{stderr}");
}

/// Issue 36, point 4: `--json` was ignored for one file (a human line went to
/// stdout). One file gives one JSON line, as a directory gives one per file,
/// then the summary line.
#[test]
fn json_describes_a_single_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    write_file(&file, b"twelve bytes");
    let store = dir.path().join("store");
    let stored = store.join("f.txt");
    let back = dir.path().join("back.txt");
    // (arguments, op, source, target)
    let cases = [
        (
            vec![
                "put",
                file.to_str().unwrap(),
                stored.to_str().unwrap(),
                "--json",
            ],
            "upload",
        ),
        (
            vec![
                "get",
                stored.to_str().unwrap(),
                back.to_str().unwrap(),
                "--json",
            ],
            "download",
        ),
    ];
    for (args, op) in cases {
        let output = run(&args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stdout}");
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{stdout}");
        assert_eq!(lines[0]["op"], op, "{stdout}");
        assert_eq!(lines[0]["size"], 12, "{stdout}");
        assert_eq!(lines[0]["ok"], true, "{stdout}");
        assert_eq!(lines[1]["summary"]["files"], 1, "{stdout}");
        assert_eq!(lines[1]["summary"]["bytes"], 12, "{stdout}");
    }
    assert_eq!(std::fs::read(&back).unwrap(), b"twelve bytes");
}

/// Issue 35: "dns error: failed to lookup address information" said nothing of
/// where. An error without an answer names the endpoint tried and the cause.
#[test]
fn a_store_that_cannot_be_reached_is_named_with_its_endpoint() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again: nothing listens there
    let endpoint = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    write_file(&file, b"hello");
    // Each command that asks the store.
    let cases: Vec<Vec<&str>> = vec![
        vec!["ls", "s3://some-bucket/", "--endpoint", &endpoint],
        vec![
            "put",
            file.to_str().unwrap(),
            "s3://some-bucket/f.txt",
            "--endpoint",
            &endpoint,
        ],
        vec![
            "get",
            "s3://some-bucket/f.txt",
            "-",
            "--endpoint",
            &endpoint,
        ],
    ];
    for args in cases {
        let output = sluice(&args)
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "y")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        let wanted = format!("could not reach the store at {endpoint}: Connection refused");
        assert!(stderr.contains(&wanted), "{args:?}: {stderr}");
        assert!(!stderr.contains("dispatch failure"), "{args:?}: {stderr}");
    }
}

/// Issue 36, point 1: `sluice ls ... | head -1` panicked ("failed printing to
/// stdout: Broken pipe") and `sluice get ... - | head -c1` said an error and
/// exited 1. A closed pipe ends the program quietly, with 0, as ripgrep does.
#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("photos")).unwrap();
    for i in 0..3000 {
        write_file(&store.join(format!("photos/{i:05}.jpg")), b"x");
    }
    write_file(&store.join("big.bin"), &vec![7u8; 32 * 1024 * 1024]);
    let listing = format!("{}/photos/", store.display());
    let object = store.join("big.bin");
    // (command, bytes read before the reader goes away)
    let cases: Vec<(Vec<&str>, usize)> = vec![
        (vec!["ls", "-r", &listing], 20),
        (vec!["get", object.to_str().unwrap(), "-"], 1),
    ];
    for (args, read) in cases {
        let mut child = sluice(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut first = vec![0u8; read];
        out.read_exact(&mut first).unwrap();
        drop(out);
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn help_names_every_flag_and_its_variable() {
    let out = run(&["put", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--endpoint",
        "--region",
        "--part-size",
        "--concurrency",
        "--memory-limit",
        "--threshold",
        "--checksum-algorithm",
        "--quiet",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    for var in [
        "SLUICE_ENDPOINT",
        "SLUICE_PART_SIZE",
        "SLUICE_MEMORY_LIMIT",
        "SLUICE_CHECKSUM",
    ] {
        assert!(help.contains(var), "{var} missing from --help");
    }
}

#[test]
fn serve_help_names_the_auth_settings() {
    let out = run(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--jwt-secret-file",
        "--jwt-public-key-file",
        "--jwt-algorithm",
        "--jwt-issuer",
        "--jwt-audience",
        "--jwt-leeway",
        "--allow-anonymous",
        "SLUICE_JWT_SECRET_FILE",
        "--direct",
        "--direct-expires",
        "--direct-endpoint",
    ] {
        assert!(help.contains(flag), "{flag} missing from serve --help");
    }
}

fn s3_args(endpoint: &str) -> Vec<String> {
    vec!["--endpoint".into(), endpoint.into(), "--quiet".into()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_through_minio() {
    let Some(endpoint) = minio::endpoint("cli_minio") else {
        return;
    };
    let store = minio::store("cli_minio").await.unwrap();
    let prefix = minio::unique_prefix("cli");
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(40 * 1024 * 1024 + 11, 3);
    let src = dir.path().join("big.bin");
    write_file(&src, &data);
    let url = format!("s3://{}/{prefix}", minio::TEST_BUCKET);
    let mut args = vec!["put".to_string(), src.to_str().unwrap().into(), url.clone()];
    args.extend(s3_args(&endpoint));
    args.extend(["--checksum-algorithm".into(), "crc64nvme".into()]);
    let out = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("crc64nvme:"));

    // The key took the file's name; fetch it back through an environment variable endpoint.
    let object = format!("{url}big.bin");
    let back = dir.path().join("back.bin");
    let out = sluice(&["get", &object, back.to_str().unwrap(), "--quiet"])
        .env("SLUICE_ENDPOINT", &endpoint)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(verified)"));
    assert!(std::fs::read(&back).unwrap() == data);
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_aborts_the_multipart_upload() {
    let Some(endpoint) = minio::endpoint("cli_ctrl_c") else {
        return;
    };
    let store = minio::store("cli_ctrl_c").await.unwrap();
    let prefix = minio::unique_prefix("ctrlc");
    let url = format!("s3://{}/{prefix}streamed", minio::TEST_BUCKET);
    let mut child = sluice(&["put", "-", &url, "--endpoint", &endpoint, "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // 40 MiB: past the threshold, so a multipart upload with parts exists; stdin stays open.
    stdin.write_all(&test_data(40 * 1024 * 1024, 4)).unwrap();
    let key = format!("{prefix}streamed");
    let mut started = false;
    for _ in 0..100 {
        let uploads = list_uploads(&endpoint, &key).await;
        if !uploads.is_empty() {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "the multipart upload never started");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    // 128 + SIGINT, as shells report a program Ctrl-C stopped (issue 36, point 7).
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    assert!(
        list_uploads(&endpoint, &key).await.is_empty(),
        "a multipart upload was left behind"
    );
    assert!(store.head_object("streamed").await.is_err());
}

/// `put --resume` continues the multipart upload an earlier run left: parts
/// whose CRC matches the file stay, a part holding other bytes is sent again,
/// and the object is the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_resume_continues_an_earlier_upload() {
    use sluice_store::{
        Body, ChecksumAlgorithm, CreateMultipartRequest, PartChecksum, UploadPartRequest,
    };
    let Some(endpoint) = minio::endpoint("cli_resume") else {
        return;
    };
    minio::store("cli_resume").await.unwrap();
    let key = format!("{}big.bin", minio::unique_prefix("resume"));
    let mut config = sluice_store::s3::S3Config::new(minio::TEST_BUCKET);
    config.endpoint = Some(endpoint.clone());
    let store = sluice_store::s3::S3Store::connect(config).await;
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(40 * 1024 * 1024 + 7, 41);
    let src = dir.path().join("big.bin");
    write_file(&src, &data);
    // What an interrupted run left: parts 1 and 3 of the file (8 MiB parts,
    // as the run is told), and a part 2 of the right size with other bytes.
    let mut create = CreateMultipartRequest::new(key.clone());
    create.checksum_algorithm = Some(ChecksumAlgorithm::Crc32c);
    let upload_id = store.create_multipart_upload(create).await.unwrap();
    let part = 8 * 1024 * 1024;
    let wrong = test_data(part, 42);
    for (number, bytes) in [
        (1, &data[..part]),
        (2, &wrong[..]),
        (3, &data[2 * part..3 * part]),
    ] {
        store
            .upload_part(UploadPartRequest {
                key: key.clone(),
                upload_id: upload_id.clone(),
                part_number: number,
                body: Body::Bytes(bytes::Bytes::copy_from_slice(bytes)),
                checksum: PartChecksum::Known(ChecksumAlgorithm::Crc32c.checksum(bytes)),
            })
            .await
            .unwrap();
    }
    let url = format!("s3://{}/{key}", minio::TEST_BUCKET);
    let out = run(&[
        "put",
        "--resume",
        src.to_str().unwrap(),
        &url,
        "--endpoint",
        &endpoint,
        "--part-size",
        "8MiB",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("6 parts, 2 of them (16.00 MiB) kept from an earlier run"),
        "{stdout}"
    );
    let back = dir.path().join("back.bin");
    let out = run(&[
        "get",
        &url,
        back.to_str().unwrap(),
        "--endpoint",
        &endpoint,
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the object is not the file"
    );
    assert!(list_uploads(&endpoint, &key).await.is_empty());

    // Nothing to continue: an ordinary upload. A pipe cannot resume.
    let out = run(&[
        "put",
        "--resume",
        src.to_str().unwrap(),
        &url,
        "--endpoint",
        &endpoint,
        "--part-size",
        "8MiB",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !stdout.contains("kept"), "{stdout}");
    let out = run(&["put", "--resume", "-", &url, "--endpoint", &endpoint]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resume needs a regular file"));
}

/// Open multipart uploads for an exact key of the test bucket.
async fn list_uploads(endpoint: &str, key: &str) -> Vec<String> {
    let mut config = sluice_store::s3::S3Config::new(minio::TEST_BUCKET);
    config.endpoint = Some(endpoint.to_string());
    let store = sluice_store::s3::S3Store::connect(config).await;
    store
        .list_multipart_uploads(key)
        .await
        .unwrap()
        .into_iter()
        .filter(|u| u.key == key)
        .map(|u| u.upload_id)
        .collect()
}

/// `sluice sign` makes URLs the gateway takes: a signed PUT stores the object, a
/// signed GET reads it back, and the PUT URL with another key is refused.
#[tokio::test]
async fn urls_from_sluice_sign_work_against_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("url.secret");
    write_file(&secret, b"a url secret of at least thirty-two bytes\n");
    let secret = secret.to_str().unwrap();
    let store = dir.path().join("store");
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--url-secret-file",
        secret,
        "--janitor-interval",
        "0s",
    ]);
    let sign = |method: &str| {
        let out = run(&[
            "sign",
            "--url-secret-file",
            secret,
            "--method",
            method,
            "--key",
            "acme/a b.txt",
            "--tenant",
            "acme",
            "--base-url",
            &gateway.url,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let client = reqwest::Client::new();
    let put = sign("PUT");
    let answer = client.put(&put).body("hello").send().await.unwrap();
    assert_eq!(answer.status(), 201);
    let moved = put.replace("a%20b.txt", "other.txt");
    let answer = client.put(&moved).body("hello").send().await.unwrap();
    assert_eq!(answer.status(), 401);
    let answer = client.get(sign("GET")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "hello");
    let unsigned = format!("{}/v1/objects/acme/a%20b.txt", gateway.url);
    assert_eq!(client.get(unsigned).send().await.unwrap().status(), 401);
    assert!(!store.join("acme/other.txt").exists());
}

#[test]
fn completions_and_the_man_page_say_what_help_says() {
    // (args, what the output holds)
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["completions", "bash"],
            &["_sluice()", "serve", "--direct", "--jwt-secret-file"],
        ),
        (
            &["completions", "zsh"],
            &["#compdef sluice", "serve", "--direct"],
        ),
        (
            &["completions", "fish"],
            &["complete -c sluice", "-l direct"],
        ),
        (
            &["man"],
            &[
                ".TH sluice 1",
                "SLUICE SERVE",
                "\\-\\-jwt\\-secret\\-file",
                "SLUICE PUT",
            ],
        ),
    ];
    for (args, holds) in cases {
        let out = run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        for wanted in holds {
            assert!(text.contains(wanted), "{args:?} lacks {wanted:?}");
        }
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
    // Issue 36, point 7: the page listed sluice-put(1) and others, which
    // are not installed. Every command is a section of this page instead.
    let page = String::from_utf8_lossy(&run(&["man"]).stdout).into_owned();
    assert!(!page.contains("(1)"), "the page names other pages");
    for command in [
        "serve", "put", "get", "ls", "mv", "presign", "mb", "rb", "stat",
    ] {
        let upper = command.to_uppercase();
        assert!(
            page.contains(&format!(".SH \"SLUICE {upper}\"")),
            "{command}"
        );
        assert!(
            page.contains(&format!("(see SLUICE {upper} below)")),
            "{command}"
        );
    }
}

/// Runs sluice in `dir` as its working directory.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    sluice(args).current_dir(dir).output().expect("run sluice")
}

/// Every file under `dir` whose path holds a `.sluice` segment, relative.
fn bookkeeping_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            if path.file_name().unwrap() == ".sluice" {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            } else if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Issue 36, point 3: `put h.txt ./sluice-data/demo/h2.txt` took `demo/` for
/// a store of its own and wrote `demo/.sluice/sidecars/…`, which then listed
/// as an object; `put f copy.txt` left `./.sluice/` in the working directory.
/// A local location lies in the store that holds it; bookkeeping is never
/// data; a directory of other files is not turned into a store.
#[test]
fn bookkeeping_never_shows_up_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    write_file(&cwd.join("h.txt"), b"hello");
    write_file(&cwd.join("notes.md"), b"my own file");

    // A new directory becomes a store; a path under it is a key of it.
    let out = run_in(cwd, &["put", "h.txt", "./sluice-data/h.txt", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_in(
        cwd,
        &["put", "h.txt", "./sluice-data/demo/h2.txt", "--quiet"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(cwd.join("sluice-data/demo/h2.txt")).unwrap(),
        b"hello"
    );
    assert_eq!(bookkeeping_under(cwd), vec!["sluice-data/.sluice"]);

    // A store nested by an older release: its bookkeeping is not listed.
    std::fs::create_dir_all(cwd.join("sluice-data/old/.sluice/sidecars")).unwrap();
    write_file(&cwd.join("sluice-data/old/.sluice/sidecars/x.json"), b"{}");
    write_file(&cwd.join("sluice-data/old/kept.txt"), b"kept");
    // (listing, keys it must show)
    let listings: [(&str, &[&str]); 3] = [
        ("./sluice-data/", &["demo/h2.txt", "h.txt", "old/kept.txt"]),
        ("./sluice-data/demo/", &["demo/h2.txt"]),
        // The nested store is the nearest one holding its own path.
        ("sluice-data/old", &["kept.txt"]),
    ];
    for (listing, keys) in listings {
        let out = run_in(cwd, &["ls", "-r", "--json", listing]);
        assert!(
            out.status.success(),
            "{listing}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                serde_json::from_str::<serde_json::Value>(line).unwrap()["key"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(listed, keys, "{listing}");
    }
    // A directory put into a new store takes the objects, not the bookkeeping.
    let out = run_in(cwd, &["put", "./sluice-data", "./copy/", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(cwd.join("copy/old/kept.txt").exists());
    assert_eq!(
        bookkeeping_under(&cwd.join("copy")),
        vec![".sluice"],
        "only the new store's own"
    );
    // A key naming bookkeeping is refused.
    let out = run_in(
        cwd,
        &["get", "./sluice-data/old/.sluice/sidecars/x.json", "x.json"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("'.sluice'"));

    // The working directory holds files of its own: no store is made in it.
    let out = run_in(cwd, &["put", "h.txt", "copy.txt"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not a directory store") && stderr.contains("sluice mb"),
        "{stderr}"
    );
    assert!(!cwd.join(".sluice").exists() && !cwd.join("copy.txt").exists());
    // Reading a plain directory of files leaves no trace in it.
    let plain = cwd.join("plain");
    std::fs::create_dir(&plain).unwrap();
    write_file(&plain.join("a.txt"), b"a");
    for args in [
        vec!["ls", "./plain/"],
        vec!["get", "./plain/a.txt", "./a-back.txt"],
    ] {
        let out = run_in(cwd, &args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!plain.join(".sluice").exists());
}

/// Issue 51: a `gs://` location without a credential, with one sluice
/// cannot use, or for what sluice does not do on GCS, is refused with a
/// message that says what to do, and nothing is sent anywhere.
#[test]
fn gcs_locations_say_what_they_lack() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let federation = file("federation.json", r#"{"type": "external_account"}"#);
    let broken = file("broken.json", "not json");
    let user = file(
        "user.json",
        r#"{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}"#,
    );
    // (arguments, GOOGLE_APPLICATION_CREDENTIALS, exit code, message)
    let cases: Vec<(Vec<&str>, Option<&str>, i32, &str)> = vec![
        (
            vec!["ls", "gs://bucket/"],
            None,
            2,
            "gs:// needs a credential",
        ),
        (
            vec!["ls", "gs://bucket/"],
            Some(federation.as_str()),
            1,
            "credential type \"external_account\" is not supported",
        ),
        (
            vec!["ls", "gs://bucket/"],
            Some(broken.as_str()),
            1,
            "is not JSON",
        ),
        (
            vec!["ls", "gs://bucket/"],
            Some("/nonexistent/key.json"),
            1,
            "GOOGLE_APPLICATION_CREDENTIALS: cannot read /nonexistent/key.json",
        ),
        (
            vec!["mb", "gs://bucket"],
            Some(user.as_str()),
            2,
            "Set GOOGLE_CLOUD_PROJECT",
        ),
        (
            vec![
                "ls",
                "gs://bucket/",
                "--endpoint",
                "http://gcs.internal:4443",
            ],
            Some(user.as_str()),
            1,
            "an access token is sent only over https, or to loopback",
        ),
        (
            vec!["presign", "gs://bucket/k", "--no-sign-request"],
            None,
            2,
            "V4 signed URLs without a service account's key",
        ),
        (
            vec!["rb", "gs://bucket"],
            None,
            2,
            "delete buckets with gcloud",
        ),
        (
            vec!["mb", "gs://bucket/k"],
            None,
            2,
            "a bucket is gs://bucket",
        ),
        (
            vec!["ls", "gs://Bucket/"],
            None,
            2,
            "not valid on Google Cloud Storage",
        ),
    ];
    for (args, credentials, code, message) in cases {
        let mut command = sluice(&args);
        command
            .env("HOME", dir.path())
            .env_remove("STORAGE_EMULATOR_HOST")
            .env_remove("CLOUDSDK_CONFIG")
            .env_remove("GOOGLE_CLOUD_PROJECT")
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS");
        if let Some(path) = credentials {
            command.env("GOOGLE_APPLICATION_CREDENTIALS", path);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
