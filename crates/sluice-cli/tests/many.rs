//! End-to-end tests of the built binary on many files, against MinIO: `put DIR`
//! and `get PREFIX/` with filters, `ls`, `sync` in both directions (a second
//! sync moves nothing; `--checksum`, `--delete`, `--dry-run`), `cp` by
//! server-side copy, `rm` in batches, per-file failures, `--fail-fast`,
//! `--json` lines and usage errors.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use sluice_testkit::{minio, test_data};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("SLUICE_LOG")
        .output()
        .expect("run sluice")
}

/// Runs sluice with the MinIO endpoint and expects success; answers stdout.
fn ok(endpoint: &str, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--endpoint", endpoint]);
    let out = sluice(&all);
    assert!(
        out.status.success(),
        "sluice {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `--json` lines of a run: per-file lines, and the summary.
fn json_lines(stdout: &str) -> (Vec<Value>, Value) {
    let mut files = Vec::new();
    let mut summary = Value::Null;
    for line in stdout.lines() {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        match value.get("summary") {
            Some(s) => summary = s.clone(),
            None => files.push(value),
        }
    }
    (files, summary)
}

/// Every file under `root` (relative path → bytes).
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if std::fs::symlink_metadata(&path).unwrap().is_symlink() {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).unwrap().to_str().unwrap();
                out.insert(relative.replace('\\', "/"), std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// A source tree: small files in nested directories, one multipart-sized
/// file, an empty directory, an excluded file and a link to a directory.
fn make_tree(root: &Path) {
    let files: &[(&str, usize)] = &[
        ("top.txt", 10),
        ("a/one.bin", 1000),
        ("a/two.bin", 2000),
        ("a/b/deep.bin", 30_000),
        ("a/b/big.bin", 20 * 1024 * 1024 + 5),
        ("c/x y+z.txt", 5),
        ("skip/me.tmp", 7),
        ("empty.bin", 0),
    ];
    for (i, (path, size)) in files.iter().enumerate() {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, test_data(*size, i as u64)).unwrap();
    }
    std::fs::create_dir_all(root.join("nothing/inside")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("a"), root.join("a/b/loop")).unwrap();
}

#[test]
fn a_directory_goes_up_and_comes_back_with_its_times() {
    let Some(endpoint) = minio::endpoint("many_round_trip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let prefix = minio::unique_prefix("many");
    let url = format!("s3://{}/{prefix}", minio::TEST_BUCKET);
    // The bucket may not exist yet in a fresh MinIO.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(minio::store("many_round_trip")).unwrap();

    let stdout = ok(
        &endpoint,
        &[
            "put",
            src.to_str().unwrap(),
            &url,
            "--exclude",
            "*.tmp",
            "--json",
        ],
    );
    let (files, summary) = json_lines(&stdout);
    assert_eq!(files.len(), 7, "{stdout}");
    assert!(
        files.iter().all(|f| f["ok"] == true && f["op"] == "upload"),
        "{stdout}"
    );
    assert_eq!(summary["files"], 7);
    assert_eq!(summary["failed"], 0);

    // One level, then everything.
    let level = ok(&endpoint, &["ls", &url]);
    let names: Vec<&str> = level
        .lines()
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    // As aws s3 ls shows them: names under the listed prefix, PRE for prefixes.
    assert_eq!(names, ["a/", "c/", "empty.bin", "top.txt"], "{level}");
    assert!(
        level
            .lines()
            .next()
            .unwrap()
            .trim_start()
            .starts_with("PRE a/"),
        "{level}"
    );
    let all = ok(&endpoint, &["ls", &url, "--recursive", "--json"]);
    let sizes: BTreeMap<String, u64> = all
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| {
            let key = v["key"]
                .as_str()
                .unwrap()
                .strip_prefix(&prefix)
                .unwrap()
                .to_string();
            (key, v["size"].as_u64().unwrap())
        })
        .collect();
    let expected: BTreeMap<String, u64> = tree(&src)
        .into_iter()
        .filter(|(k, _)| !k.ends_with(".tmp"))
        .map(|(k, v)| (k, v.len() as u64))
        .collect();
    assert_eq!(sizes, expected);
    // Bytes by default, KiB/MiB with -H, whole keys with -r; then totals.
    let exact = ok(&endpoint, &["ls", &format!("{url}a/b/")]);
    assert!(
        exact.contains(&format!("{} big.bin", 20 * 1024 * 1024 + 5)),
        "{exact}"
    );
    let human = ok(&endpoint, &["ls", &format!("{url}a/b/"), "-H"]);
    assert!(human.contains("20.00 MiB big.bin"), "{human}");
    let summarized = ok(&endpoint, &["ls", &url, "-r", "--summarize"]);
    assert!(
        summarized.contains(&format!(" {prefix}a/b/big.bin\n")),
        "{summarized}"
    );
    assert!(
        summarized.ends_with(&format!(
            "Total Objects: 7\n   Total Size: {}\n",
            expected.values().sum::<u64>()
        )),
        "{summarized}"
    );

    // Back down, whole and filtered.
    let back = dir.path().join("back");
    let stdout = ok(&endpoint, &["get", &url, back.to_str().unwrap(), "--quiet"]);
    assert!(stdout.starts_with("downloaded 7 files"), "{stdout}");
    let mut source = tree(&src);
    source.remove("skip/me.tmp");
    assert!(tree(&back) == source, "downloaded tree differs");
    // Each file flushed before its rename: the same tree.
    let flushed = dir.path().join("flushed");
    let stdout = ok(
        &endpoint,
        &["get", &url, flushed.to_str().unwrap(), "--quiet", "--fsync"],
    );
    assert!(stdout.starts_with("downloaded 7 files"), "{stdout}");
    assert!(
        tree(&flushed) == source,
        "tree downloaded with --fsync differs"
    );
    for file in ["top.txt", "a/b/big.bin", "empty.bin"] {
        let (a, b) = (modified(&src.join(file)), modified(&back.join(file)));
        let apart = a
            .duration_since(b)
            .or_else(|e| Ok::<_, ()>(e.duration()))
            .unwrap();
        assert!(
            apart < Duration::from_millis(1),
            "{file}: mtimes {a:?} and {b:?}"
        );
    }
    let only = dir.path().join("only");
    ok(
        &endpoint,
        &[
            "get",
            &url,
            only.to_str().unwrap(),
            "--include",
            "a/**",
            "--exclude",
            "big.bin",
        ],
    );
    let got: Vec<String> = tree(&only).into_keys().collect();
    assert_eq!(got, ["a/b/deep.bin", "a/one.bin", "a/two.bin"]);
}

#[test]
fn sync_moves_only_what_differs() {
    let Some(endpoint) = minio::endpoint("many_sync") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(minio::store("many_sync")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    // A skipped entry stops --delete (tried below); the rest runs without it.
    let link = src.join("a/b/loop");
    std::fs::remove_file(&link).unwrap();
    let url = format!(
        "s3://{}/{}",
        minio::TEST_BUCKET,
        minio::unique_prefix("sync")
    );
    let sync = |args: &[&str]| {
        let mut all = vec!["sync"];
        all.extend(args);
        all.push("--json");
        json_lines(&ok(&endpoint, &all))
    };
    let source = src.to_str().unwrap();

    let (files, summary) = sync(&[source, &url]);
    assert_eq!((files.len(), &summary["unchanged"]), (8, &Value::from(0)));
    // Unchanged: nothing moves, and no file is read again.
    let (files, summary) = sync(&[source, &url]);
    assert!(files.is_empty(), "{files:?}");
    assert_eq!(summary["unchanged"], 8);

    // A changed size is seen; so is a touched file with new content.
    std::fs::write(src.join("a/one.bin"), b"shorter").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(src.join("a/two.bin"), test_data(2000, 99)).unwrap();
    let (files, _) = sync(&[source, &url]);
    let moved: Vec<&str> = files
        .iter()
        .map(|f| f["source"].as_str().unwrap())
        .collect();
    assert_eq!(moved.len(), 2, "{moved:?}");
    assert!(moved
        .iter()
        .all(|m| m.ends_with("one.bin") || m.ends_with("two.bin")));

    // Same size and time, other bytes: only --checksum sees it.
    let deep = src.join("a/b/deep.bin");
    let time = modified(&deep);
    std::fs::write(&deep, test_data(30_000, 77)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&deep)
        .unwrap()
        .set_modified(time)
        .unwrap();
    let (files, _) = sync(&[source, &url]);
    assert!(files.is_empty(), "{files:?}");
    let (files, summary) = sync(&[source, &url, "--checksum"]);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0]["target"]
        .as_str()
        .unwrap()
        .ends_with("a/b/deep.bin"));
    assert_eq!(summary["unchanged"], 7);

    // --delete, first as a dry run; a source the walk could not read whole
    // (here a link to a directory, not followed) deletes nothing.
    std::fs::remove_file(src.join("c/x y+z.txt")).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(src.join("a"), &link).unwrap();
        let out = sluice(&["sync", source, &url, "--delete", "--endpoint", &endpoint]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("nothing is deleted"));
        assert!(ok(&endpoint, &["ls", &format!("{url}c/")]).contains("x y+z.txt"));
        std::fs::remove_file(&link).unwrap();
    }
    let out = ok(&endpoint, &["sync", source, &url, "--delete", "--dry-run"]);
    assert!(
        out.contains("would be deleted") && out.contains("x y+z.txt"),
        "{out}"
    );
    assert!(ok(&endpoint, &["ls", &format!("{url}c/")]).contains("x y+z.txt"));
    let (files, _) = sync(&[source, &url, "--delete"]);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["op"], "delete");
    assert!(!ok(&endpoint, &["ls", &url, "-r"]).contains("x y+z.txt"));

    // Down into a directory, twice; then --delete removes a stray local file.
    let mirror = dir.path().join("mirror");
    let (files, _) = sync(&[&url, mirror.to_str().unwrap()]);
    assert_eq!(files.len(), 7);
    let (files, summary) = sync(&[&url, mirror.to_str().unwrap()]);
    assert!(files.is_empty(), "{files:?}");
    assert_eq!(summary["unchanged"], 7);
    std::fs::write(mirror.join("stray.txt"), b"stray").unwrap();
    let (files, _) = sync(&[&url, mirror.to_str().unwrap(), "--delete"]);
    assert_eq!(files.len(), 1);
    assert!(!mirror.join("stray.txt").exists());
    assert!(
        tree(&mirror) == tree(&src),
        "the mirror differs from the source"
    );
}

#[test]
fn cp_copies_server_side_and_rm_removes_in_batches() {
    let Some(endpoint) = minio::endpoint("many_cp_rm") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(minio::store("many_cp_rm")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let base = format!("s3://{}/{}", minio::TEST_BUCKET, minio::unique_prefix("cp"));
    let (from, to) = (format!("{base}from/"), format!("{base}to/"));
    ok(&endpoint, &["cp", src.to_str().unwrap(), &from, "--quiet"]);

    let out = ok(&endpoint, &["cp", &from, &to, "--json"]);
    let (files, summary) = json_lines(&out);
    assert_eq!(summary["files"], 8);
    assert!(files.iter().all(|f| f["op"] == "copy"));
    // One object, into a prefix: it keeps its name.
    let out = ok(
        &endpoint,
        &[
            "cp",
            &format!("{from}a/b/big.bin"),
            &format!("{base}single/"),
        ],
    );
    assert!(out.contains("server-side copy"), "{out}");
    let back = dir.path().join("back");
    ok(&endpoint, &["get", &to, back.to_str().unwrap(), "--quiet"]);
    assert!(tree(&back) == tree(&src), "copied tree differs");
    let single = dir.path().join("single.bin");
    ok(
        &endpoint,
        &[
            "get",
            &format!("{base}single/big.bin"),
            single.to_str().unwrap(),
            "--quiet",
        ],
    );
    assert!(std::fs::read(&single).unwrap() == std::fs::read(src.join("a/b/big.bin")).unwrap());

    // rm: a dry run changes nothing; filters pick what goes.
    let before = ok(&endpoint, &["ls", &to, "-r"]);
    let out = ok(
        &endpoint,
        &[
            "rm",
            &to,
            "--include",
            "*.bin",
            "--exclude",
            "a/b/**",
            "--dry-run",
        ],
    );
    assert_eq!(out.matches("would be deleted:").count(), 3, "{out}");
    assert_eq!(ok(&endpoint, &["ls", &to, "-r"]), before);
    let (files, summary) = json_lines(&ok(
        &endpoint,
        &[
            "rm",
            &to,
            "--include",
            "*.bin",
            "--exclude",
            "a/b/**",
            "--json",
        ],
    ));
    assert_eq!((files.len(), &summary["files"]), (3, &Value::from(3)));
    let left = ok(&endpoint, &["ls", &to, "-r"]);
    let left: Vec<&str> = left
        .lines()
        .map(|l| l.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(left.len(), 5, "{left:?}");
    assert!(
        !left.contains(&"one.bin") && left.contains(&"deep.bin"),
        "{left:?}"
    );
    ok(&endpoint, &["rm", &to]);
    assert_eq!(ok(&endpoint, &["ls", &to, "-r"]), "");
    // One key, and a key that is not there.
    ok(&endpoint, &["rm", &format!("{base}single/big.bin")]);
    let out = sluice(&[
        "rm",
        &format!("{base}single/big.bin"),
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no object"));
}

#[test]
fn a_failed_file_does_not_stop_the_others_unless_fail_fast() {
    let Some(endpoint) = minio::endpoint("many_failures") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(minio::store("many_failures")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // A path of over 1,024 bytes cannot be a key; it sorts first.
    let long = (0..5)
        .map(|_| "a".repeat(240))
        .collect::<Vec<_>>()
        .join("/");
    for (path, size) in [
        (long.as_str(), 10),
        ("b.txt", 10),
        ("c.txt", 20),
        ("d.txt", 30),
    ] {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, test_data(size, 1)).unwrap();
    }
    let url = format!(
        "s3://{}/{}",
        minio::TEST_BUCKET,
        minio::unique_prefix("fail")
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "put",
            src.to_str().unwrap(),
            url.as_str(),
            "--endpoint",
            &endpoint,
        ];
        args.extend(extra);
        sluice(&args)
    };
    let out = run(&["--fail-fast", "--jobs", "1", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let (files, summary) = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["ok"], false);
    assert!(
        files[0]["error"].as_str().unwrap().contains("1024"),
        "{files:?}"
    );
    // The three others are "not done" when the walk had found them before
    // the failure stopped it: it runs on a thread of its own, so between
    // none and all three.
    // (The exact count is a unit test's: many::tests, fail_fast_counts_...)
    assert_eq!(summary["failed"], Value::from(1), "{summary}");
    assert_eq!(summary["files"], Value::from(0), "{summary}");
    let cancelled = summary["cancelled"].as_u64().unwrap();
    assert!(cancelled <= 3, "{summary}");
    assert_eq!(ok(&endpoint, &["ls", &url]), "");

    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 file failed:") && stderr.contains(&long[..240]),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("uploaded 3 files") && stdout.contains("1 failed"),
        "{stdout}"
    );
    assert_eq!(ok(&endpoint, &["ls", &url]).lines().count(), 3);

    // A key under _sluice/ at the bucket's root is refused before any request.
    let state = dir.path().join("state");
    std::fs::create_dir_all(state.join("_sluice")).unwrap();
    std::fs::write(state.join("_sluice/forged.json"), b"{}").unwrap();
    let bucket = format!("s3://{}/", minio::TEST_BUCKET);
    let out = sluice(&[
        "put",
        state.to_str().unwrap(),
        &bucket,
        "--endpoint",
        &endpoint,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let (files, summary) = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["op"], "refused");
    assert_eq!(files[0]["ok"], false);
    assert_eq!(
        (&summary["files"], &summary["failed"]),
        (&Value::from(0), &Value::from(1))
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (inside, restore) = (format!("{d}/store/"), format!("{d}/restore"));
    let store = format!("{d}/");
    let cases: &[(&[&str], &str)] = &[
        (&["cp", d, d], "both local"),
        // A directory store inside the tree, or the tree inside the store.
        (&["put", d, &inside], "overlap"),
        (&["get", &store, &restore], "overlap"),
        (&["sync", d, d], "both local"),
        (&["get", "s3://bucket/prefix/", "-"], "is a prefix"),
        (&["put", d, "s3://bucket/p/", "--jobs", "0"], "--jobs 0"),
        (
            &["put", d, "s3://bucket/p/", "--include", "a["],
            "--include \"a[\"",
        ),
        (
            &["rm", "s3://bucket/key", "--include", "*.txt"],
            "end the location with /",
        ),
        (&["rm", d], "must end with /"),
        (&["rm", "s3://bucket"], "write s3://bucket/"),
        (&["cp", "s3://bucket/a/", "s3://bucket/a/b/"], "overlap"),
        (&["sync", "s3://bucket/a/b/", "s3://bucket/a/"], "overlap"),
        (
            &["get", "s3://bucket/key", "out", "--include", "*.txt"],
            "not of one file",
        ),
        (&["ls", "s3://BAD/"], "bucket name"),
    ];
    for (args, message) in cases {
        let out = sluice(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
