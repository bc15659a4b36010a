//! The README's command-line examples, run: every line of the block between
//! `<!-- readme-test: begin -->` and `<!-- readme-test: end -->`, in order,
//! through `sh` against MinIO, with the buckets it names made unique to the
//! run and the files it names made first. A line that fails fails the test,
//! so the README cannot show a command that does not work.

use std::path::Path;
use std::process::Command;

use sluice_testkit::{minio, test_data};

const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));

/// The example lines of the README's command-line block.
fn example_lines() -> Vec<String> {
    let block = README
        .split("<!-- readme-test: begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- readme-test: end -->").next())
        .expect("the README has a readme-test block");
    block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("```"))
        .map(str::to_string)
        .collect()
}

/// `s3://name` becomes `s3://name-SUFFIX` everywhere in `line`.
fn unique_buckets(line: &str, suffix: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut buckets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("s3://") {
        let (before, after) = rest.split_at(at + "s3://".len());
        out.push_str(before);
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            .unwrap_or(after.len());
        let name = &after[..end];
        out.push_str(&format!("{name}-{suffix}"));
        buckets.push(format!("{name}-{suffix}"));
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, buckets)
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

#[test]
fn the_readme_command_line_examples_work() {
    let Some(endpoint) = minio::endpoint("readme") else {
        return;
    };
    let lines = example_lines();
    assert!(lines.len() >= 10, "{lines:?}");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    // The files the examples name.
    write(&work.join("big.iso"), &test_data(3 * 1024 * 1024, 1));
    write(&work.join("photos/notes.txt"), b"shot on film");
    write(&work.join("photos/2026-01/a.jpg"), b"jpeg a");
    write(&work.join("photos/2026-02/b.jpg"), b"jpeg b");
    write(&work.join("photos/scratch.tmp"), b"not this");
    write(&work.join("site/index.html"), b"<h1>www</h1>");
    write(&work.join("site/style.css"), b"h1{}");

    let suffix = format!("r{}", std::process::id());
    let binary = Path::new(env!("CARGO_BIN_EXE_sluice"));
    let path = format!(
        "{}:{}",
        binary.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let sh = |line: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(work)
            .env("PATH", &path)
            .env("SLUICE_ENDPOINT", &endpoint)
            .env_remove("SLUICE_LOG")
            .output()
            .unwrap()
    };
    // Buckets the examples use but do not make.
    let made: Vec<String> = lines
        .iter()
        .filter(|line| line.starts_with("sluice mb "))
        .flat_map(|line| unique_buckets(line, &suffix).1)
        .collect();
    let mut used: Vec<String> = lines
        .iter()
        .flat_map(|line| unique_buckets(line, &suffix).1)
        .collect();
    used.sort();
    used.dedup();
    for bucket in used.iter().filter(|b| !made.contains(b)) {
        let out = sh(&format!("sluice mb s3://{bucket}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let mut outputs = Vec::new();
    for line in &lines {
        if line.starts_with("export SLUICE_ENDPOINT=") {
            continue; // the test's own endpoint is in the environment
        }
        let (line, _) = unique_buckets(line, &suffix);
        let out = sh(&line);
        assert!(
            out.status.success(),
            "README line failed: {line}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push((line, String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    let output_of = |verb: &str| {
        outputs
            .iter()
            .find(|(line, _)| line.starts_with(&format!("sluice {verb} ")))
            .map(|(_, out)| out.clone())
            .unwrap_or_default()
    };
    // What the examples say they do, they did.
    assert_eq!(output_of("cat"), "shot on film");
    assert!(output_of("stat").contains("Size"), "{}", output_of("stat"));
    assert!(
        output_of("ls").contains("PRE 2026-01/"),
        "{}",
        output_of("ls")
    );
    assert_eq!(
        std::fs::read(work.join("jpgs/2026-02/b.jpg")).unwrap(),
        b"jpeg b"
    );
    assert!(!work.join("jpgs/notes.txt").exists());
    assert!(!work.join("photos-copy/scratch.tmp").exists());
    assert!(
        output_of("du").contains("in 4 objects"),
        "{}",
        output_of("du")
    );
    assert!(
        output_of("rm").contains("would be deleted"),
        "{}",
        output_of("rm")
    );
    let www = format!("s3://www-{suffix}/index.html");
    let stat = sh(&format!("sluice stat {www}"));
    let stat = String::from_utf8_lossy(&stat.stdout);
    assert!(
        stat.contains("text/html") && stat.contains("max-age=300"),
        "{stat}"
    );
    let url = output_of("presign");
    let fetched = Command::new("curl")
        .args(["-sf", url.trim()])
        .output()
        .unwrap();
    assert_eq!(fetched.stdout, test_data(3 * 1024 * 1024, 1));
    // The last example removed its bucket; the test removes the others.
    let buckets = String::from_utf8_lossy(&sh("sluice ls").stdout).into_owned();
    assert!(!buckets.contains(&format!("media-{suffix}")), "{buckets}");
    for bucket in used.iter().filter(|b| !b.starts_with("media-")) {
        let out = sh(&format!("sluice rb s3://{bucket} --force"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bucket_names_are_made_unique_everywhere_in_a_line() {
    let (line, buckets) = unique_buckets(
        "sluice cp s3://media/photos/ s3://archive/photos/ 's3://x.y/*'",
        "r1",
    );
    assert_eq!(
        line,
        "sluice cp s3://media-r1/photos/ s3://archive-r1/photos/ 's3://x.y-r1/*'"
    );
    assert_eq!(buckets, ["media-r1", "archive-r1", "x.y-r1"]);
}
