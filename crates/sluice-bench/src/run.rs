//! Executing a plan: the closed model (users uploading in a loop) and the open model
//! (arrivals on a fixed schedule, never waiting for answers), a once-a-second tick for
//! live progress, and the summary at the end.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant as TokioInstant;

use crate::plan::{LoadPlan, Model, Stop};
use crate::record::{Recorder, Summary};
use crate::upload::{StoreSender, Uploader};
use crate::BenchError;

/// Progress once a second.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub elapsed: Duration,
    pub succeeded: u64,
    pub failed: u64,
    pub in_flight: usize,
}

struct Shared {
    uploader: Uploader,
    recorder: Mutex<Recorder>,
    start: Instant,
    next_seq: AtomicU64,
    in_flight: AtomicUsize,
}

impl Shared {
    async fn one(&self) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.recorder
            .lock()
            .expect("recorder")
            .started(self.start.elapsed());
        let attempt = self.uploader.upload(seq).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.recorder
            .lock()
            .expect("recorder")
            .ended(self.start.elapsed(), &attempt);
    }
}

/// Runs the plan to its end and summarises it. `on_tick` is called once a second.
pub async fn run(
    plan: LoadPlan,
    on_tick: Option<Box<dyn Fn(Tick) + Send + Sync>>,
) -> Result<Summary, BenchError> {
    plan.validate()?;
    let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let target = json!({ "api": plan.target.api, "url": plan.target.url, "keys": plan.key_scheme });
    let model = describe(&plan.model);
    let (object_size, min_object_size) = (plan.object_size, plan.min_object_size);
    let store = match &plan.target.s3 {
        Some(s3) => Some(store_sender(s3, plan.target.api).await?),
        None => None,
    };
    let shared = Arc::new(Shared {
        uploader: Uploader::new(plan.clone(), run_id(), store),
        recorder: Mutex::new(Recorder::new()),
        start: Instant::now(),
        next_seq: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
    });
    let ticker = on_tick.map(|on_tick| {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            interval.tick().await;
            loop {
                interval.tick().await;
                let (succeeded, failed) = shared.recorder.lock().expect("recorder").counts();
                on_tick(Tick {
                    elapsed: shared.start.elapsed(),
                    succeeded,
                    failed,
                    in_flight: shared.in_flight.load(Ordering::Relaxed),
                });
            }
        })
    });
    match plan.model {
        Model::Closed { users, ramp, stop } => closed(&shared, users, ramp, stop).await,
        Model::Open {
            rate,
            max_in_flight,
            duration,
        } => open(&shared, rate, max_in_flight, duration).await,
    }
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    let mut summary =
        shared
            .recorder
            .lock()
            .expect("recorder")
            .summary(target, model, object_size, started_at);
    summary.min_object_size = min_object_size;
    Ok(summary)
}

async fn closed(shared: &Arc<Shared>, users: usize, ramp: Duration, stop: Stop) {
    let start = TokioInstant::now();
    let mut tasks = JoinSet::new();
    for user in 0..users {
        let shared = shared.clone();
        let begin = start + ramp.mul_f64(user as f64 / users as f64);
        tasks.spawn(async move {
            tokio::time::sleep_until(begin).await;
            let mut done = 0;
            loop {
                match stop {
                    Stop::Iterations(n) if done >= n => break,
                    Stop::Duration(d) if start.elapsed() >= d => break,
                    _ => {}
                }
                shared.one().await;
                done += 1;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

async fn open(shared: &Arc<Shared>, rate: f64, max_in_flight: usize, duration: Duration) {
    let start = TokioInstant::now();
    let mut tasks = JoinSet::new();
    for arrival in 0u64.. {
        let offset = Duration::from_secs_f64(arrival as f64 / rate);
        if offset >= duration {
            break;
        }
        tokio::time::sleep_until(start + offset).await;
        while tasks.try_join_next().is_some() {}
        if shared.in_flight.load(Ordering::Relaxed) >= max_in_flight {
            shared.recorder.lock().expect("recorder").not_started();
            continue;
        }
        let shared = shared.clone();
        // Counted in flight before the task runs, so that a burst cannot overshoot.
        shared.in_flight.fetch_add(1, Ordering::Relaxed);
        tasks.spawn(async move {
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            shared.one().await;
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// The engine the S3 APIs upload with: no retries, one PUT or always multipart.
async fn store_sender(
    s3: &crate::plan::S3Target,
    api: crate::Api,
) -> Result<StoreSender, BenchError> {
    let mut config = sluice_store::s3::S3Config::new(&s3.bucket);
    config.endpoint = s3.endpoint.clone();
    config.region = s3.region.clone().or_else(|| Some("us-east-1".into()));
    let store: Arc<dyn sluice_store::ObjectStore> =
        Arc::new(sluice_store::s3::S3Store::connect(config).await);
    let mut engine = sluice_upload::EngineConfig::default();
    engine.retry.max_attempts = 1;
    engine.threshold = if api == crate::Api::S3Multipart {
        0
    } else {
        crate::MAX_OBJECT_SIZE
    };
    engine.memory_limit = engine.memory_limit.max(2 * crate::MAX_OBJECT_SIZE);
    let engine = sluice_upload::Engine::new(store, engine)
        .map_err(|e| BenchError::InvalidPlan(e.to_string()))?;
    Ok(StoreSender {
        engine,
        prefix: s3.prefix.clone(),
    })
}

fn describe(model: &Model) -> serde_json::Value {
    match model {
        Model::Closed { users, ramp, stop } => {
            let (iterations, duration) = match stop {
                Stop::Iterations(n) => (Some(*n), None),
                Stop::Duration(d) => (None, Some(d.as_secs_f64())),
            };
            json!({ "kind": "closed", "users": users, "ramp_s": ramp.as_secs_f64(),
                    "iterations": iterations, "duration_s": duration })
        }
        Model::Open {
            rate,
            max_in_flight,
            duration,
        } => json!({ "kind": "open", "rate": rate, "max_in_flight": max_in_flight,
                     "duration_s": duration.as_secs_f64() }),
    }
}

/// A short id that keeps the keys of two runs apart.
fn run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut n = nanos ^ u128::from(std::process::id()) << 64;
    let mut id = String::new();
    while n > 0 && id.len() < 12 {
        id.push(char::from_digit((n % 36) as u32, 36).expect("digit"));
        n /= 36;
    }
    id
}
