//! The verbs users of aws s3 and s5cmd reach for besides put/get/ls/rm/cp/sync:
//! `cat`, `stat`, `du`, `presign` (used with curl) and `mv`, against MinIO.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use sluice_testkit::{minio, test_data};

fn sluice(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).env_remove("SLUICE_LOG");
    command
}

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

fn failing(endpoint: &str, args: &[&str], code: i32, says: &str) {
    let out = run(endpoint, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

fn curl(args: &[&str]) -> (u32, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl");
    let mut body = out.stdout;
    let status_at = body.iter().rposition(|b| *b == b'\n').unwrap();
    let status = String::from_utf8_lossy(&body[status_at + 1..])
        .parse()
        .unwrap();
    body.truncate(status_at);
    (status, body)
}

/// Prepares `prefix` in the test bucket: a.txt, big.bin (9 MiB), logs/1.gz, logs/2.gz.
fn seed(endpoint: &str, base: &str, dir: &Path) -> Vec<u8> {
    let big = test_data(9 * 1024 * 1024, 7);
    write(&dir.join("seed/a.txt"), b"hello, world");
    write(&dir.join("seed/big.bin"), &big);
    write(&dir.join("seed/logs/1.gz"), b"one");
    write(&dir.join("seed/logs/2.gz"), b"two!");
    ok(
        endpoint,
        &[
            "put",
            dir.join("seed").to_str().unwrap(),
            base,
            "--quiet",
            "--metadata",
            "owner=ann",
        ],
    );
    big
}

/// The test MinIO's endpoint (with the test bucket made), a scratch
/// directory and a location of the test's own; `None` when the tests may skip.
fn prepared(test: &str, prefix: &str) -> Option<(String, tempfile::TempDir, String)> {
    let endpoint = minio::endpoint(test)?;
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(minio::store(test))
        .unwrap();
    let base = format!(
        "s3://{}/{}",
        minio::TEST_BUCKET,
        minio::unique_prefix(prefix)
    );
    Some((endpoint, tempfile::tempdir().unwrap(), base))
}

#[test]
fn cat_stat_du_and_presign() {
    let Some((endpoint, dir, base)) = prepared("verbs", "verbs") else {
        return;
    };
    let big = seed(&endpoint, &base, dir.path());

    // cat: the bytes and nothing else, however large.
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}a.txt")]),
        "hello, world"
    );
    let out = run(&endpoint, &["cat", &format!("{base}big.bin")]);
    assert!(out.status.success());
    assert!(out.stdout == big, "cat of a ranged download differs");
    assert!(out.stderr.is_empty() || !String::from_utf8_lossy(&out.stderr).contains("downloaded"));
    failing(
        &endpoint,
        &["cat", &format!("{base}nope.txt")],
        1,
        "no such object",
    );

    // stat, for people and as JSON.
    let text = ok(&endpoint, &["stat", &format!("{base}a.txt")]);
    for row in [
        "Size                 12 B (12 bytes)",
        "Content-Type         text/plain",
        "Metadata owner       ann",
    ] {
        assert!(text.contains(row), "{row:?} not in:\n{text}");
    }
    let json: Value = serde_json::from_str(&ok(
        &endpoint,
        &["stat", &format!("{base}big.bin"), "--json"],
    ))
    .unwrap();
    assert_eq!(json["size"], 9 * 1024 * 1024);
    assert_eq!(json["content_type"], "application/octet-stream");
    assert_eq!(json["metadata"]["owner"], "ann");
    assert!(
        json["checksum"].as_str().unwrap().starts_with("crc32c:"),
        "{json}"
    );
    failing(
        &endpoint,
        &["stat", &format!("{base}nope.txt")],
        1,
        "no such object",
    );

    // du: everything, a sub-prefix, a filter.
    // (arguments, objects, bytes)
    let cases: [(Vec<String>, u64, u64); 3] = [
        (vec![base.clone()], 4, 12 + 9 * 1024 * 1024 + 3 + 4),
        (vec![format!("{base}logs/")], 2, 7),
        (vec![base.clone(), "--include".into(), "*.gz".into()], 2, 7),
    ];
    for (args, objects, bytes) in cases {
        let mut all: Vec<&str> = vec!["du"];
        all.extend(args.iter().map(String::as_str));
        all.push("--json");
        let json: Value = serde_json::from_str(&ok(&endpoint, &all)).unwrap();
        assert_eq!(
            (json["objects"].as_u64(), json["bytes"].as_u64()),
            (Some(objects), Some(bytes)),
            "{args:?}"
        );
    }
    let human = ok(&endpoint, &["du", &format!("{base}logs/")]);
    assert!(human.starts_with("7 B in 2 objects"), "{human}");

    // presign: curl fetches, uploads and deletes with no credentials.
    let get = ok(&endpoint, &["presign", &format!("{base}a.txt")]);
    assert_eq!(curl(&[get.trim()]), (200, b"hello, world".to_vec()));
    let put = ok(
        &endpoint,
        &[
            "presign",
            &format!("{base}up.txt"),
            "--method",
            "put",
            "--expires",
            "5m",
        ],
    );
    let upload = dir.path().join("up.txt");
    write(&upload, b"by curl");
    assert_eq!(curl(&["-T", upload.to_str().unwrap(), put.trim()]).0, 200);
    assert_eq!(ok(&endpoint, &["cat", &format!("{base}up.txt")]), "by curl");
    let delete = ok(
        &endpoint,
        &["presign", &format!("{base}up.txt"), "--method", "DELETE"],
    );
    assert_eq!(curl(&["-X", "DELETE", delete.trim()]).0, 204);
    failing(
        &endpoint,
        &["stat", &format!("{base}up.txt")],
        1,
        "no such object",
    );
    // A URL for GET does not allow PUT; an expired one nothing.
    assert_eq!(curl(&["-T", upload.to_str().unwrap(), get.trim()]).0, 403);
    let short = ok(
        &endpoint,
        &["presign", &format!("{base}a.txt"), "--expires", "1s"],
    );
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(curl(&[short.trim()]).0, 403);
    failing(
        &endpoint,
        &["presign", &format!("{base}a.txt"), "--expires", "8d"],
        2,
        "7 days",
    );
    failing(&endpoint, &["presign", &base], 2, "names no object");
}

#[test]
fn mv_removes_each_source_once_its_copy_is_complete() {
    let Some(endpoint) = minio::endpoint("mv") else {
        return;
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(minio::store("mv"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("s3://{}/{}", minio::TEST_BUCKET, minio::unique_prefix("mv"));
    let big = seed(&endpoint, &base, dir.path());
    let keys = |prefix: &str| -> Vec<String> {
        ok(&endpoint, &["ls", "-r", "--json", prefix])
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["key"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };

    // Prefix to prefix (server-side), with a filter: only what matched moves.
    ok(
        &endpoint,
        &[
            "mv",
            &format!("{base}logs/"),
            &format!("{base}archive/"),
            "--include",
            "1.gz",
            "--quiet",
        ],
    );
    let all = keys(&base);
    // Keys are listed whole: the test's prefix, then the name.
    let names: Vec<&str> = all.iter().map(|k| k.split_once('/').unwrap().1).collect();
    assert_eq!(
        names,
        vec!["a.txt", "archive/1.gz", "big.bin", "logs/2.gz"],
        "{all:?}"
    );

    // Object to file (ranged download), then the file back up.
    let local = dir.path().join("down/big.bin");
    ok(
        &endpoint,
        &[
            "mv",
            &format!("{base}big.bin"),
            local.to_str().unwrap(),
            "--quiet",
        ],
    );
    assert_eq!(std::fs::read(&local).unwrap(), big);
    failing(
        &endpoint,
        &["stat", &format!("{base}big.bin")],
        1,
        "no such object",
    );
    ok(
        &endpoint,
        &[
            "mv",
            local.to_str().unwrap(),
            &format!("{base}up/"),
            "--quiet",
        ],
    );
    assert!(!local.exists());
    assert_eq!(
        run(&endpoint, &["cat", &format!("{base}up/big.bin")]).stdout,
        big
    );

    // A directory up: its files go, each after its upload.
    let tree = dir.path().join("tree");
    write(&tree.join("x/1.txt"), b"1");
    write(&tree.join("2.txt"), b"2");
    ok(
        &endpoint,
        &[
            "mv",
            tree.to_str().unwrap(),
            &format!("{base}tree/"),
            "--quiet",
        ],
    );
    assert_eq!(ok(&endpoint, &["cat", &format!("{base}tree/x/1.txt")]), "1");
    assert!(!tree.join("x/1.txt").exists() && !tree.join("2.txt").exists());

    // A copy that fails leaves its source: the destination is a file that
    // is in the way of a directory.
    let blocked = dir.path().join("blocked");
    write(&blocked, b"a file");
    let out = run(
        &endpoint,
        &[
            "mv",
            &format!("{base}a.txt"),
            &format!("{}/sub/a.txt", blocked.display()),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}a.txt")]),
        "hello, world"
    );
    failing(
        &endpoint,
        &["mv", "-", &format!("{base}x")],
        2,
        "standard input",
    );
    // A prefix named without its `/` (issue 36, point 6): the hint says so.
    let logs = format!("{base}logs");
    // (command, what the hint says)
    let cases: [(&[&str], &str); 3] = [
        (
            &["rm", &logs],
            "add a trailing / to remove what is under it",
        ),
        (
            &["cp", &logs, &format!("{base}x/")],
            "add a trailing / to copy",
        ),
        (
            &["get", &logs, dir.path().to_str().unwrap()],
            "add a trailing / to get",
        ),
    ];
    for (args, says) in cases {
        failing(&endpoint, args, 1, says);
    }
}

/// A client of the test MinIO, for what sluice does not do (bucket policies).
async fn admin(endpoint: &str) -> aws_sdk_s3::Client {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(sluice_store::s3::http_client())
        .region(aws_config::Region::new("us-east-1"))
        .load()
        .await;
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// `--endpoint-url`, `--profile` and `--no-sign-request` as aws takes them.
#[test]
fn aws_flags_mean_what_they_mean_to_aws() {
    let Some(endpoint) = minio::endpoint("aws_flags") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bucket = format!("public-{}", std::process::id());
    let url = format!("s3://{bucket}");
    let out = sluice(&["mb", &url, "--endpoint-url", &endpoint])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.path().join("open.txt");
    write(&file, b"for everyone");
    ok(
        &endpoint,
        &[
            "put",
            file.to_str().unwrap(),
            &format!("{url}/open.txt"),
            "--quiet",
        ],
    );

    // A profile of the shared files wins over credentials in the environment.
    let config = dir.path().join("config");
    let credentials = dir.path().join("credentials");
    write(&config, b"[profile lab]\nregion = us-east-1\n");
    let (key, secret) = (
        std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
        std::env::var("AWS_SECRET_ACCESS_KEY").unwrap(),
    );
    write(
        &credentials,
        format!("[lab]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n").as_bytes(),
    );
    let with_profile = |profile: &str| {
        sluice(&[
            "cat",
            &format!("{url}/open.txt"),
            "--endpoint-url",
            &endpoint,
            "--profile",
            profile,
        ])
        .env("AWS_CONFIG_FILE", &config)
        .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
        .env("AWS_ACCESS_KEY_ID", "not-these")
        .env("AWS_SECRET_ACCESS_KEY", "not-these-either")
        .output()
        .unwrap()
    };
    let out = with_profile("lab");
    assert_eq!(
        out.stdout,
        b"for everyone",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = with_profile("nosuch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no credentials found: profile `nosuch` was not defined"),
        "{stderr}"
    );

    // Unsigned: refused by a private bucket, served by a public one.
    let unsigned = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--endpoint-url", &endpoint, "--no-sign-request"]);
        sluice(&all)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .output()
            .unwrap()
    };
    let out = unsigned(&["cat", &format!("{url}/open.txt")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("access denied"));
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": ["*"]},
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
        }],
    });
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        admin(&endpoint)
            .await
            .put_bucket_policy()
            .bucket(&bucket)
            .policy(policy.to_string())
            .send()
            .await
            .unwrap();
    });
    let out = unsigned(&["cat", &format!("{url}/open.txt")]);
    assert_eq!(
        out.stdout,
        b"for everyone",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = unsigned(&["ls", &format!("{url}/")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("open.txt"));
    // Writing is not in the policy.
    let out = unsigned(&["put", file.to_str().unwrap(), &format!("{url}/mine.txt")]);
    assert_eq!(out.status.code(), Some(1));
    ok(&endpoint, &["rb", &url, "--force"]);
}

/// `--no-clobber` leaves what is there (uploads refused by the store itself)
/// and `--dry-run` changes nothing, on put, get, cp and mv, one file or many.
#[test]
fn no_clobber_keeps_and_dry_run_changes_nothing() {
    let Some((endpoint, dir, base)) = prepared("no_clobber", "noclobber") else {
        return;
    };
    seed(&endpoint, &base, dir.path());
    let newer = dir.path().join("newer");
    write(&newer.join("a.txt"), b"newer a");
    write(&newer.join("fresh.txt"), b"fresh");
    let newer_arg = newer.to_str().unwrap();
    let a = format!("{base}a.txt");

    // One file: kept, exit 0, said so.
    let out = ok(
        &endpoint,
        &[
            "put",
            newer.join("a.txt").to_str().unwrap(),
            &a,
            "--no-clobber",
        ],
    );
    assert!(out.contains("kept") && out.contains("it exists"), "{out}");
    assert_eq!(ok(&endpoint, &["cat", &a]), "hello, world");
    // A directory: the taken key kept, the free one written.
    let json = ok(&endpoint, &["put", newer_arg, &base, "-n", "--json"]);
    let summary: Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            summary["summary"]["files"].as_u64(),
            summary["summary"]["kept"].as_u64()
        ),
        (Some(1), Some(1)),
        "{json}"
    );
    assert_eq!(ok(&endpoint, &["cat", &a]), "hello, world");
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}fresh.txt")]),
        "fresh"
    );
    // Down: an existing file is kept.
    let local = dir.path().join("local.txt");
    write(&local, b"mine");
    ok(
        &endpoint,
        &["get", &a, local.to_str().unwrap(), "--no-clobber"],
    );
    assert_eq!(std::fs::read(&local).unwrap(), b"mine");
    // mv with --no-clobber: neither side changes.
    ok(&endpoint, &["mv", &format!("{base}fresh.txt"), &a, "-n"]);
    assert_eq!(ok(&endpoint, &["cat", &a]), "hello, world");
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}fresh.txt")]),
        "fresh"
    );

    // --dry-run: what would happen, and nothing happens.
    let listing_before = ok(&endpoint, &["ls", "-r", &base]);
    let (elsewhere, logs) = (format!("{base}elsewhere/"), format!("{base}logs/"));
    let (newer_a, down, got) = (
        newer.join("a.txt"),
        dir.path().join("down"),
        dir.path().join("got.txt"),
    );
    let (newer_a, down_arg, got_arg) = (
        newer_a.to_str().unwrap(),
        down.to_str().unwrap(),
        got.to_str().unwrap(),
    );
    // (arguments, what stdout says)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["put", newer_arg, &elsewhere], "dry run: 2 to upload"),
        (vec!["put", newer_a, &elsewhere], "would upload"),
        (vec!["cp", &logs, &elsewhere], "dry run: 2 to copy"),
        (vec!["mv", &a, &elsewhere], "then remove the source"),
        (vec!["mv", &base, down_arg], "each source then removed"),
        (vec!["get", &a, got_arg], "would download"),
    ];
    for (mut args, says) in cases {
        args.push("--dry-run");
        let out = ok(&endpoint, &args);
        assert!(
            out.contains(says) && out.contains("nothing changed"),
            "{args:?}: {out}"
        );
    }
    assert_eq!(ok(&endpoint, &["ls", "-r", &base]), listing_before);
    assert!(!down.exists() && !got.exists());
    failing(
        &endpoint,
        &["put", "--resume", "-n", newer_arg, &a],
        2,
        "give one",
    );
}

/// Wildcards as s5cmd takes them, on ls, get, cp, du, rm and a local
/// source; --include/--exclude still apply on top.
#[test]
fn wildcards_select_keys_and_files() {
    let Some((endpoint, dir, base)) = prepared("wildcards", "wild") else {
        return;
    };
    let tree = dir.path().join("tree");
    for name in [
        "logs/2026-01/a.gz",
        "logs/2026-02/b.gz",
        "logs/2025-12/c.gz",
        "logs/2026-01/keep.txt",
        "photos/x.jpg",
        "photos/trip/y.jpg",
        "photos/z.png",
    ] {
        write(&tree.join(name), name.as_bytes());
    }
    // A local source with a wildcard: `*` crosses `/`, as in s5cmd.
    let photos = format!("{}/photos/*.jpg", tree.display());
    let out = ok(
        &endpoint,
        &["put", &photos, &format!("{base}jpg/"), "--json"],
    );
    assert!(out.contains("\"files\":2"), "{out}");
    ok(
        &endpoint,
        &[
            "put",
            &format!("{}/logs/", tree.display()),
            &format!("{base}logs/"),
            "--quiet",
        ],
    );
    let pattern = format!("{base}logs/2026-*/*.gz");

    let keys = |listing: &str| -> Vec<String> {
        listing
            .lines()
            .map(|l| {
                l.rsplit(' ')
                    .next()
                    .unwrap()
                    .rsplit_once("/logs/")
                    .map_or(l.to_string(), |(_, k)| k.to_string())
            })
            .collect()
    };
    assert_eq!(
        keys(&ok(&endpoint, &["ls", &pattern])),
        ["2026-01/a.gz", "2026-02/b.gz"]
    );
    let jpgs = ok(&endpoint, &["ls", &format!("{base}jpg/*")]);
    assert_eq!(jpgs.lines().count(), 2, "{jpgs}");
    assert!(
        jpgs.contains("jpg/trip/y.jpg") && !jpgs.contains("png"),
        "{jpgs}"
    );
    let du: Value = serde_json::from_str(&ok(&endpoint, &["du", &pattern, "--json"])).unwrap();
    assert_eq!(du["objects"], 2);

    let out = dir.path().join("out");
    ok(
        &endpoint,
        &["get", &pattern, out.to_str().unwrap(), "--quiet"],
    );
    assert_eq!(
        std::fs::read(out.join("2026-01/a.gz")).unwrap(),
        b"logs/2026-01/a.gz"
    );
    assert!(out.join("2026-02/b.gz").exists() && !out.join("2025-12").exists());
    assert!(!out.join("2026-01/keep.txt").exists());

    ok(
        &endpoint,
        &["cp", &pattern, &format!("{base}copied/"), "--quiet"],
    );
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}copied/2026-02/b.gz")]),
        "logs/2026-02/b.gz"
    );
    assert_eq!(
        ok(&endpoint, &["ls", "-r", &format!("{base}copied/")])
            .lines()
            .count(),
        2
    );

    // rm with a wildcard and an exclude on top; then only the rest is left.
    ok(&endpoint, &["rm", &pattern, "--exclude", "b.gz"]);
    let left = keys(&ok(&endpoint, &["ls", "-r", &format!("{base}logs/")]));
    assert_eq!(left, ["2025-12/c.gz", "2026-01/keep.txt", "2026-02/b.gz"]);
}

/// `sluice run` (s5cmd run): a file of commands, several at once; each
/// command's output printed, each failure reported by its line, and an exit
/// code that says whether any failed.
#[test]
fn a_file_of_commands_runs_and_says_what_failed() {
    let Some((endpoint, dir, base)) = prepared("batch", "batch") else {
        return;
    };
    let mut commands = String::from("# uploads, then copies back\n\n");
    for i in 0..20 {
        let file = dir.path().join(format!("in/{i}.txt"));
        write(&file, format!("file {i}").as_bytes());
        commands += &format!("put '{}' {base}up/{i}.txt --quiet\n", file.display());
    }
    let file = dir.path().join("commands.txt");
    std::fs::write(&file, &commands).unwrap();
    let out = sluice(&["run", file.to_str().unwrap(), "--endpoint", &endpoint])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 20);
    assert!(stderr.contains("ran 20 commands: 0 failed"), "{stderr}");

    // From standard input, with failures among successes.
    let down = dir.path().join("down");
    let lines = format!(
        "sluice get {base}up/ '{}' --quiet\ncat {base}up/7.txt\ncat {base}up/missing.txt\nserve\ncp --frobnicate a b\nls {base}up/ --summarize\n",
        down.display()
    );
    let mut child = sluice(&["run", "-", "--endpoint", &endpoint, "--jobs", "3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stdout.contains("file 7") && stdout.contains("Total Objects: 20"),
        "{stdout}"
    );
    for failure in [
        "line 3 (cat ",
        "no such object",
        "line 4 (serve): `serve` cannot run from a file",
        "line 5 (cp --frobnicate a b)",
        "ran 6 commands: 3 failed",
    ] {
        assert!(stderr.contains(failure), "{failure:?} not in:\n{stderr}");
    }
    assert_eq!(std::fs::read(down.join("19.txt")).unwrap(), b"file 19");

    // --json: a line per command on standard error.
    let mut child = sluice(&["run", "-", "--endpoint", &endpoint, "--json"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("stat {base}up/1.txt\nstat {base}up/none\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let reports: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut oks: Vec<(u64, bool)> = reports
        .iter()
        .filter_map(|r| Some((r["line"].as_u64()?, r["ok"].as_bool()?)))
        .collect();
    oks.sort();
    assert_eq!(oks, [(1, true), (2, false)], "{reports:?}");
}

/// What a fresh-eyes review found could lose data or mislead, each tried.
#[test]
fn the_review_holes_stay_closed() {
    let Some(endpoint) = minio::endpoint("review_holes") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(minio::store("review_holes")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = format!(
        "s3://{}/{}",
        minio::TEST_BUCKET,
        minio::unique_prefix("holes")
    );
    seed(&endpoint, &base, dir.path());
    let a = format!("{base}a.txt");

    // mv (or cp) of an object onto itself: refused, the object stays.
    failing(
        &endpoint,
        &["mv", &a, &a],
        2,
        "both the source and the destination",
    );
    failing(
        &endpoint,
        &["mv", &a, &base],
        2,
        "both the source and the destination",
    );
    assert_eq!(ok(&endpoint, &["cat", &a]), "hello, world");

    // A key with `?` in it: --raw removes that key, not what the pattern matches.
    let odd = dir.path().join("odd");
    write(&odd.join("what?.txt"), b"literal");
    write(&odd.join("whatX.txt"), b"other");
    ok(
        &endpoint,
        &[
            "put",
            odd.to_str().unwrap(),
            &format!("{base}odd/"),
            "--quiet",
        ],
    );
    ok(&endpoint, &["rm", "--raw", &format!("{base}odd/what?.txt")]);
    assert_eq!(
        ok(&endpoint, &["cat", &format!("{base}odd/whatX.txt")]),
        "other"
    );
    failing(
        &endpoint,
        &["stat", &format!("{base}odd/what?.txt")],
        1,
        "no such object",
    );
    // A local path that exists is itself, not a pattern.
    let out = ok(
        &endpoint,
        &[
            "put",
            odd.join("what?.txt").to_str().unwrap(),
            &format!("{base}lit/"),
            "--json",
        ],
    );
    assert!(out.contains("\"files\":1"), "{out}");

    // Keys holding a `.sluice` segment are never written as local files.
    let sidecar = dir.path().join("sidecar.json");
    write(&sidecar, b"{}");
    ok(
        &endpoint,
        &[
            "put",
            sidecar.to_str().unwrap(),
            &format!("{base}tree/x/.sluice/sidecars/a.json"),
            "--quiet",
        ],
    );
    ok(
        &endpoint,
        &[
            "put",
            sidecar.to_str().unwrap(),
            &format!("{base}tree/x/data.json"),
            "--quiet",
        ],
    );
    let down = dir.path().join("down");
    ok(
        &endpoint,
        &[
            "get",
            &format!("{base}tree/"),
            down.to_str().unwrap(),
            "--quiet",
        ],
    );
    assert!(down.join("x/data.json").exists() && !down.join("x/.sluice").exists());

    // SLUICE_CONTENT_TYPE is a default for uploads, not a flag a copy refuses.
    let out = sluice(&[
        "cp",
        &a,
        &format!("{base}copy.txt"),
        "--endpoint",
        &endpoint,
    ])
    .env("SLUICE_CONTENT_TYPE", "text/plain")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Commands from a file may not use standard input or output.
    let mut child = sluice(&["run", "-", "--endpoint", &endpoint])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("get {a} -\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`-` (standard input or output)"));

    // Local stores: no store inside a store, no rm in a plain directory, and
    // rb does not remove the directory it is run from.
    let store = dir.path().join("store");
    ok(&endpoint, &["mb", store.to_str().unwrap()]);
    failing(
        &endpoint,
        &["mb", store.join("inner").to_str().unwrap()],
        2,
        "lies in the directory store",
    );
    let plain = dir.path().join("plain");
    write(&plain.join("keep.o"), b"object file");
    failing(
        &endpoint,
        &["rm", &format!("{}/", plain.display())],
        2,
        "use rm(1)",
    );
    failing(
        &endpoint,
        &["rm", &format!("{}/*.o", plain.display())],
        2,
        "use rm(1)",
    );
    assert!(plain.join("keep.o").exists());
    let out = sluice(&["rb", ".", "--force"])
        .current_dir(&store)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(store.join(".sluice").is_dir());

    // rb --force empties a bucket of what transfers leave alone: a folder
    // marker (a key ending in /) and sluice's own _sluice/ state.
    let bucket = format!("holes-{}", std::process::id());
    ok(&endpoint, &["mb", &format!("s3://{bucket}")]);
    runtime.block_on(async {
        let client = admin(&endpoint).await;
        for key in ["folder/", "_sluice/probe", "plain.txt"] {
            client
                .put_object()
                .bucket(&bucket)
                .key(key)
                .body(aws_sdk_s3::primitives::ByteStream::from_static(b"x"))
                .send()
                .await
                .unwrap();
        }
    });
    let out = ok(&endpoint, &["rb", &format!("s3://{bucket}"), "--force"]);
    assert!(
        out.contains("deleted 3 objects") && out.contains("removed bucket"),
        "{out}"
    );
}

/// `presign az://…`: a service SAS, checked by Azurite against the account
/// key, lets curl read, write and delete one blob with no key of its own,
/// and nothing else: not another method, not altered, not after it expires.
#[test]
fn presign_on_azure_gives_sas_urls_curl_uses_without_the_key() {
    let test = "verbs-azure-presign";
    let Some(endpoint) = sluice_testkit::azurite::endpoint(test) else {
        return;
    };
    // The test container, made once for every Azure test.
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(sluice_testkit::azurite::store(test))
        .unwrap();
    let connection = format!(
        "AccountName={};AccountKey={};BlobEndpoint={endpoint}",
        sluice_store::az::EMULATOR_ACCOUNT,
        sluice_store::az::EMULATOR_KEY,
    );
    let az = |args: &[&str], connection: &str| {
        sluice(args)
            .env("AZURE_STORAGE_CONNECTION_STRING", connection)
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let out = az(args, &connection);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let base = format!(
        "az://{}/{}",
        sluice_testkit::azurite::TEST_CONTAINER,
        sluice_testkit::minio::unique_prefix(test)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.txt");
    write(&file, b"hello, blob");
    ok(&["put", file.to_str().unwrap(), &format!("{base}a b/ü.txt")]);

    let get = ok(&["presign", &format!("{base}a b/ü.txt")]);
    assert!(get.starts_with(&endpoint), "{get}");
    assert!(get.contains("sr=b") && get.contains("sp=r&"), "{get}");
    assert_eq!(curl(&[&get]), (200, b"hello, blob".to_vec()));
    // The URL allows reading, nothing else; and a changed one nothing.
    let upload = dir.path().join("up.txt");
    write(&upload, b"by curl");
    let blob_type = "x-ms-blob-type: BlockBlob";
    let as_put = ["-T", upload.to_str().unwrap(), "-H", blob_type];
    assert_eq!(curl(&[&as_put[..], &[get.as_str()]].concat()).0, 403);
    let elsewhere = get.replacen("/a%20b/", "/b%20a/", 1);
    assert_ne!(elsewhere, get);
    assert_eq!(curl(&[&elsewhere]).0, 403);
    let widened = get.replace("sp=r&", "sp=rcwd&");
    assert_ne!(widened, get);
    assert_eq!(curl(&[&widened]).0, 403);

    let put = ok(&[
        "presign",
        &format!("{base}up.txt"),
        "--method",
        "put",
        "--expires",
        "5m",
    ]);
    assert_eq!(curl(&[&as_put[..], &[put.as_str()]].concat()).0, 201);
    assert_eq!(ok(&["cat", &format!("{base}up.txt")]), "by curl");
    let delete = ok(&["presign", &format!("{base}up.txt"), "--method", "DELETE"]);
    assert_eq!(curl(&["-X", "DELETE", &delete]).0, 202);
    let gone = az(&["stat", &format!("{base}up.txt")], &connection);
    assert_eq!(gone.status.code(), Some(1));

    let short = ok(&["presign", &format!("{base}a b/ü.txt"), "--expires", "3s"]);
    assert_eq!(curl(&[&short]).0, 200);
    std::thread::sleep(std::time::Duration::from_millis(4100));
    assert_eq!(curl(&[&short]).0, 403);

    // Without the key there is nothing to sign with: said, and no URL.
    let sas_only = format!(
        "AccountName={};SharedAccessSignature=sv=2026-02-06&sig=x;BlobEndpoint={endpoint}",
        sluice_store::az::EMULATOR_ACCOUNT
    );
    let refused = az(&["presign", &format!("{base}a b/ü.txt")], &sas_only);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("AZURE_STORAGE_KEY"), "{stderr}");
    assert!(refused.stdout.is_empty());
}

/// `presign gs://…`: the V4 signed URL is, byte for byte, the one Google's
/// own library (google-cloud-storage, tests/clients/gcs_signed_url.py) makes
/// from the same service account key for the same moment, for each method,
/// on Google's endpoint and on an emulator's; credentials that cannot sign
/// are refused with what to set.
#[test]
fn presign_on_gcs_equals_google_s_own_signed_urls() {
    let test = "verbs-gcs-presign";
    let (clients, python) = match (
        std::env::var("SLUICE_TEST_CLIENTS"),
        std::env::var("SLUICE_TEST_PYTHON"),
    ) {
        (Ok(dir), Ok(python)) if !dir.is_empty() => (dir, python),
        _ if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") => {
            panic!("{test}: google-cloud-storage is not installed (SLUICE_TEST_CLIENTS, SLUICE_TEST_PYTHON)")
        }
        _ => {
            eprintln!("SKIPPED {test}: no Python clients (run scripts/test.sh)");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("key.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&pem)
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{made:?}");
    let key_file = dir.path().join("key.json");
    let key = serde_json::json!({
        "type": "service_account",
        "project_id": "acme",
        "private_key_id": "k1",
        "private_key": std::fs::read_to_string(&pem).unwrap(),
        "client_email": "uploader@acme.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    std::fs::write(&key_file, key.to_string()).unwrap();
    let presign = |args: &[&str], credentials: &Path| {
        sluice(args)
            .env("GOOGLE_APPLICATION_CREDENTIALS", credentials)
            .env_remove("STORAGE_EMULATOR_HOST")
            .output()
            .unwrap()
    };
    let cases = [
        (None, "GET", "photos/a b/ü~(1).jpg"),
        (None, "PUT", "up.bin"),
        (Some("http://127.0.0.1:4443"), "DELETE", "dir/k"),
    ];
    for (endpoint, method, name) in cases {
        let location = format!("gs://acme-media/{name}");
        let mut args = vec!["presign", &location, "--method", method, "--expires", "2h"];
        if let Some(endpoint) = endpoint {
            args.extend(["--endpoint", endpoint]);
        }
        let out = presign(&args, &key_file);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let date = url
            .split(['?', '&'])
            .find_map(|pair| pair.strip_prefix("X-Goog-Date="))
            .unwrap_or_else(|| panic!("no X-Goog-Date in {url}"));
        let google = Command::new(&python)
            .arg(format!("{clients}/gcs_signed_url.py"))
            .arg(&key_file)
            .args([
                endpoint.unwrap_or("https://storage.googleapis.com"),
                "acme-media",
                name,
                method,
                "7200",
                date,
            ])
            .output()
            .unwrap();
        assert!(
            google.status.success(),
            "{}",
            String::from_utf8_lossy(&google.stderr)
        );
        assert_eq!(
            url,
            String::from_utf8(google.stdout).unwrap().trim(),
            "{method} {name}"
        );
    }
    // A user's refresh token cannot sign (Google's library refuses it too).
    let user = dir.path().join("user.json");
    std::fs::write(
        &user,
        r#"{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}"#,
    )
    .unwrap();
    let refused = presign(&["presign", "gs://acme-media/k"], &user);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("GOOGLE_APPLICATION_CREDENTIALS") && stderr.contains("service account"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty());
}
