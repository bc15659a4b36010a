//! The Apache Iceberg REST Compatibility Kit against `sluice serve`:
//! iceberg-open-api 1.10.1's `RESTCompatibilityKitCatalogTests` (Iceberg's
//! own `CatalogTests` through its Java `RESTCatalog` client), run by
//! scripts/rck.sh with the JUnit console launcher. Every test the kit runs
//! must pass; the ones it aborts are those whose assumptions its catalog
//! class leaves off (nested and empty namespaces), whatever the server.
//! Names with dots are tested (the kit's `rck.supports-names-with-dot`).

use std::process::Command;

/// A count from the kit's summary (`[ 95 tests successful ]`).
fn count(summary: &str, what: &str) -> u64 {
    summary
        .lines()
        .find(|line| line.contains(what))
        .and_then(|line| {
            line.trim_matches(|c| c == '[' || c == ']' || c == ' ')
                .split_whitespace()
                .next()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {what:?} in the kit's summary:\n{summary}"))
}

#[test]
fn the_rest_compatibility_kit_passes_against_sluice_serve() {
    let Ok(classpath) = std::env::var("SLUICE_TEST_RCK_CLASSPATH") else {
        assert!(
            std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() != Ok("1"),
            "the kit's jars are not resolved (SLUICE_TEST_RCK_CLASSPATH; scripts/test.sh does it)"
        );
        eprintln!("SKIPPED: no REST Compatibility Kit (run scripts/test.sh)");
        return;
    };
    let report = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rck");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/rck.sh");
    let output = Command::new(script)
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg(&classpath)
        .arg(&report)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "scripts/rck.sh: {}{summary}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{summary}");
    let failed = count(&summary, "tests failed");
    let passed = count(&summary, "tests successful");
    let found = count(&summary, "tests found");
    let log = std::fs::read_to_string(report.join("rck.log")).unwrap_or_default();
    let failures: Vec<&str> = log.lines().filter(|l| l.contains('✘')).collect();
    assert_eq!(
        failed,
        0,
        "failed in the kit ({}):\n{}",
        report.display(),
        failures.join("\n")
    );
    // The kit's 1.10.1 catalog tests: 102, of which 5 assume what its own
    // catalog class leaves off whatever the server (nested and empty
    // namespaces); the names-with-dots pair runs by its switch.
    assert!(passed >= 97 && found >= 102, "{summary}");
}
