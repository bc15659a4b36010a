//! What the record-stream and Delta table tests share: `sluice ingest` and
//! `sluice tables` runs on a directory store, and looking at what they left
//! on disk.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `command` with `input` on its standard input (written from a thread
/// of its own: a run that stops early closes the pipe), capturing its output.
pub fn fed(command: &mut Command, input: &[u8]) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

/// `sluice ingest --table delta` of `input` into stream `t` under `store`
/// (flushing every 5,000 records, invalid ones to a dead letter).
pub fn ingest_into_delta(store: &std::path::Path, input: &str) -> serde_json::Value {
    let output = fed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["ingest", "--stream", "t", "--table", "delta", "--json"])
            .args([
                "--flush-records",
                "5000",
                "--dead-letter-template",
                "dead/{uuid}",
            ])
            .arg("--store")
            .arg(store),
        input.as_bytes(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `sluice tables ARGS…` on the directory store `store`; its stdout.
pub fn tables(store: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("tables")
        .arg(args[0])
        .arg("--store")
        .arg(store)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Every file under `dir`.
pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Every file under `dir`, none when it does not exist.
pub fn walk_if_there(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    match dir.exists() {
        true => walk(dir),
        false => Vec::new(),
    }
}

/// The Parquet files under `dir`.
pub fn parquet_files(dir: &std::path::Path) -> usize {
    walk_if_there(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .count()
}

/// The add paths of a directory store's Delta table at `table`, from its log.
pub fn table_files(table: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    for commit in walk_if_there(&table.join("_delta_log")) {
        if commit.extension().is_none_or(|e| e != "json") {
            continue;
        }
        for line in std::fs::read_to_string(&commit).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(path) = action["add"]["path"].as_str() {
                files.push(path.to_owned());
            }
        }
    }
    files.sort();
    files
}

/// Runs `command` (a `sluice ingest` into the table at `table`) on the first
/// half of `input` and SIGKILLs it once it stored three Parquet files.
pub fn kill_once_files_are_stored(command: &mut Command, input: &str, table: &std::path::Path) {
    let mut run = command.spawn().unwrap();
    let mut stdin = run.stdin.take().unwrap();
    stdin
        .write_all(&input.as_bytes()[..input.len() / 2])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while parquet_files(table) < 3 {
        assert!(std::time::Instant::now() < deadline, "no file stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.kill().unwrap();
    run.wait().unwrap();
}
