//! The operator assets under deploy/ (issue 35): the Prometheus alert rules pass
//! `promtool check rules` and their own `promtool test rules` cases, and every
//! metric the rules and the Grafana dashboard query is one `/metrics` exports.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use axum::body::Body;
use http_body_util::BodyExt;
use sluice_server::{AppState, ServerConfig};
use sluice_testkit::MemoryStore;
use tower::ServiceExt;

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

/// The `sluice_*` names a text uses, histogram and counter suffixes kept.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("sluice_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// What `/metrics` exports once an upload went through.
async fn exported() -> BTreeSet<String> {
    let state = AppState::new(ServerConfig::default(), Arc::new(MemoryStore::new())).unwrap();
    let router = state.router();
    let put = http::Request::put("/v1/objects/k")
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(router.clone().oneshot(put).await.unwrap().status(), 201);
    let get = http::Request::get("/metrics").body(Body::empty()).unwrap();
    let body = router
        .oneshot(get)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap();
    String::from_utf8_lossy(&body.to_bytes())
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn rules_and_dashboard_query_metrics_that_exist() {
    let exported = exported().await;
    let rules = std::fs::read_to_string(deploy("prometheus-rules.yml")).unwrap();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana-dashboard.json")).unwrap())
            .unwrap();
    let mut queries = String::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for target in targets {
            queries.push_str(target["expr"].as_str().unwrap());
            queries.push('\n');
        }
    }
    // (file, what it queries)
    for (file, text) in [
        ("prometheus-rules.yml", &rules),
        ("grafana-dashboard.json", &queries),
    ] {
        let named = metric_names(text);
        assert!(named.len() >= 5, "{file}: {named:?}");
        let unknown: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} queries metrics /metrics does not export: {unknown:?}"
        );
    }
}

#[test]
fn promtool_checks_the_rules_and_their_tests() {
    let promtool = std::env::var("SLUICE_TEST_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    if Command::new(&promtool).arg("--version").output().is_err() {
        if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") {
            panic!("promtool is not installed (scripts/test.sh installs it)");
        }
        eprintln!("SKIPPED promtool: not installed");
        return;
    }
    for args in [
        ["check", "rules", "prometheus-rules.yml"],
        ["test", "rules", "prometheus-rules.test.yml"],
    ] {
        let output = Command::new(&promtool)
            .args(args)
            .current_dir(deploy(""))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
