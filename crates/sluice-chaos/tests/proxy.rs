//! The proxy between the S3 backend and a real MinIO: each fault, forced on,
//! reaches the client as the error it stands for, and the store sees (or does
//! not see) the request as the fault says.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_chaos::{ChaosConfig, ChaosProxy, FaultRates, Operation};
use sluice_store::s3::{S3Config, S3Store};
use sluice_store::{ObjectStore, PutRequest};
use sluice_testkit::minio;

async fn proxied_store(test: &str, config: ChaosConfig) -> Option<(ChaosProxy, S3Store)> {
    let endpoint = minio::endpoint(test)?;
    // Create the bucket straight on MinIO.
    minio::store(test).await?;
    let proxy = ChaosProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), &endpoint, config)
        .await
        .expect("start the proxy");
    let mut s3 = S3Config::new(minio::TEST_BUCKET);
    s3.endpoint = Some(proxy.url());
    s3.region = Some("us-east-1".into());
    s3.prefix = minio::unique_prefix(test);
    s3.stall_timeout = Some(Duration::from_millis(700));
    let store = S3Store::connect(s3).await;
    Some((proxy, store))
}

fn only_put(rates: FaultRates) -> ChaosConfig {
    let mut config = ChaosConfig::default();
    config.per_operation.insert(Operation::PutObject, rates);
    config.stall_for = Duration::from_secs(3);
    config
}

#[tokio::test]
async fn each_fault_reaches_the_client_as_its_error() {
    // (name, rates for PutObject, Retry-After, expected error kind, object stored?)
    let cases: Vec<(&str, FaultRates, Option<u32>, &str, bool)> = vec![
        (
            "slowdown",
            FaultRates {
                slowdown: 1.0,
                ..Default::default()
            },
            Some(2),
            "throttled",
            false,
        ),
        (
            "internal",
            FaultRates {
                internal_error: 1.0,
                ..Default::default()
            },
            None,
            "service",
            false,
        ),
        (
            "reset-request",
            FaultRates {
                reset_request: 1.0,
                ..Default::default()
            },
            None,
            "transport",
            false,
        ),
        (
            "reset-response",
            FaultRates {
                reset_response: 1.0,
                ..Default::default()
            },
            None,
            "transport",
            true,
        ),
        (
            "stall",
            FaultRates {
                stall: 1.0,
                ..Default::default()
            },
            None,
            "stalled",
            true,
        ),
    ];
    for (name, rates, retry_after, kind, stored) in cases {
        let mut config = only_put(rates);
        config.retry_after = retry_after;
        let Some((proxy, store)) = proxied_store("chaos-fault", config).await else {
            return;
        };
        let error = store
            .put_object(PutRequest::new("k", vec![7u8; 300 * 1024]))
            .await
            .expect_err(name);
        assert_eq!(error.kind(), kind, "{name}: {error}");
        assert!(error.is_transient(), "{name}");
        if name == "slowdown" {
            assert_eq!(error.retry_after(), Some(Duration::from_secs(2)));
        }
        // Other operations pass untouched; the object is there only if the store
        // handled the request.
        let found = store.head_object("k").await;
        assert_eq!(found.is_ok(), stored, "{name}: {found:?}");
        let stats = proxy.stats();
        assert_eq!(stats.requests_of(Operation::PutObject), 1);
        // The PUT is counted under its fault; the HEAD went through.
        assert_eq!(
            stats.totals.store_ok + stats.totals.store_error,
            1,
            "{name}: {:?}",
            stats.totals
        );
    }
}

#[tokio::test]
async fn the_write_cap_throttles_a_prefix_above_its_rate() {
    let config = ChaosConfig {
        write_rate_per_prefix: Some(5.0),
        ..ChaosConfig::default()
    };
    let Some((proxy, store)) = proxied_store("chaos-cap", config).await else {
        return;
    };
    let mut throttled = 0;
    for i in 0..10 {
        match store
            .put_object(PutRequest::new(format!("k{i}"), vec![1u8; 10]))
            .await
        {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.kind(), "throttled");
                throttled += 1;
            }
        }
    }
    // A burst of 1 token, refilled at 5/s: most of ten quick writes are refused.
    assert!(throttled >= 5, "{throttled}");
    let stats = proxy.stats();
    assert_eq!(stats.totals.rate_limited, throttled);
    assert_eq!(
        stats.seconds.iter().map(|s| s.counts.requests).sum::<u64>(),
        stats.totals.requests
    );
}

#[tokio::test]
async fn latency_is_added_and_reads_pass() {
    let config = ChaosConfig {
        latency: Duration::from_millis(300),
        ..ChaosConfig::default()
    };
    let Some((_proxy, store)) = proxied_store("chaos-latency", config).await else {
        return;
    };
    let started = std::time::Instant::now();
    store
        .put_object(PutRequest::new("k", vec![1u8; 1000]))
        .await
        .unwrap();
    let meta = store.head_object("k").await.unwrap();
    assert_eq!(meta.size, 1000);
    assert!(started.elapsed() >= Duration::from_millis(600));
}
