//! What the tests that read from Kafka share: the broker scripts/kafka.sh
//! started (KAFKA_BOOTSTRAP, KAFKA_CP), Kafka's own command-line tools run
//! through java, and the records they produce.

use std::io::Write;
use std::process::{Command, Stdio};

/// The broker's address and the Kafka classpath, or None when Kafka tests may skip.
pub fn kafka() -> Option<(String, String)> {
    match (std::env::var("KAFKA_BOOTSTRAP"), std::env::var("KAFKA_CP")) {
        (Ok(bootstrap), Ok(cp)) => Some((bootstrap, cp)),
        _ if std::env::var_os("SLUICE_TEST_S3_REQUIRED").is_some() => {
            panic!("KAFKA_BOOTSTRAP and KAFKA_CP must be set (scripts/test.sh starts a broker)")
        }
        _ => {
            eprintln!("skipping: no Kafka broker (run scripts/test.sh)");
            None
        }
    }
}

/// Runs Kafka tool `class` (its classpath `cp`) with `args`, `input` on its
/// standard input.
pub fn kafka_tool(cp: &str, class: &str, args: &[&str], input: Option<&[u8]>) {
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-cp", cp, class])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("java");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "{class} {args:?}");
}

/// Creates `topic` with `partitions` partitions.
pub fn create_topic(cp: &str, bootstrap: &str, topic: &str, partitions: u32) {
    kafka_tool(
        cp,
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    );
}

/// Record `n`: `{"n":N,"pad":"k…"}` with `pad` bytes of pad.
pub fn record(n: u64, pad: usize) -> String {
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "k".repeat(pad))
}
