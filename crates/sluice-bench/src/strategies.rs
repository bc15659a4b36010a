//! `sluice bench strategies`: how long one object takes to upload as a single PUT,
//! as a multipart upload with one part at a time, and with parts in parallel, for
//! each of a list of sizes, against a store the caller opened. Each object is
//! deleted after it is measured; the payload is generated in memory.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;
use sluice_store::{limits, ObjectStore};
use sluice_upload::{format_size, Engine, EngineConfig, UploadRequest, UploadSource};

use crate::upload::payload;
use crate::BenchError;

/// How an object is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    SinglePut,
    MultipartSequential,
    MultipartParallel,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [
        Strategy::SinglePut,
        Strategy::MultipartSequential,
        Strategy::MultipartParallel,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Strategy::SinglePut => "single PUT",
            Strategy::MultipartSequential => "multipart, 1 at a time",
            Strategy::MultipartParallel => "multipart, parallel",
        }
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct StrategyPlan {
    pub sizes: Vec<u64>,
    pub part_size: u64,
    /// Parts in flight for the parallel strategy.
    pub concurrency: usize,
    /// Uploads per size and strategy; the median is reported.
    pub repeat: u32,
    /// Keys are `{key_prefix}/{size}-{strategy}-{n}`.
    pub key_prefix: String,
}

/// One size and strategy.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyResult {
    pub size: u64,
    pub strategy: Strategy,
    /// Median seconds, or None when the strategy does not apply or failed.
    pub seconds: Option<f64>,
    pub mib_per_s: Option<f64>,
    pub parts: u32,
    /// Why there is no time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl StrategyPlan {
    pub fn validate(&self) -> Result<(), BenchError> {
        let invalid = |m: String| Err(BenchError::InvalidPlan(m));
        if self.sizes.is_empty() {
            return invalid("give at least one size".into());
        }
        if let Some(big) = self.sizes.iter().find(|&&s| s > crate::MAX_OBJECT_SIZE) {
            return invalid(format!(
                "{} is over the 1 GiB limit (the payload is held in memory)",
                format_size(*big)
            ));
        }
        if !(limits::MIN_PART_SIZE..=limits::MAX_PART_SIZE).contains(&self.part_size) {
            return invalid("the part size must be 5 MiB to 5 GiB".into());
        }
        if self.concurrency == 0 || self.concurrency > 64 {
            return invalid("the concurrency must be 1 to 64".into());
        }
        if self.repeat == 0 || self.repeat > 20 {
            return invalid("repeat must be 1 to 20".into());
        }
        Ok(())
    }
}

fn engine_for(
    store: &Arc<dyn ObjectStore>,
    plan: &StrategyPlan,
    strategy: Strategy,
    size: u64,
) -> Result<Engine, String> {
    let mut config = EngineConfig {
        part_size: plan.part_size,
        ..EngineConfig::default()
    };
    match strategy {
        Strategy::SinglePut => {
            config.threshold = size;
            config.memory_limit = config.memory_limit.max(size + plan.part_size);
        }
        Strategy::MultipartSequential | Strategy::MultipartParallel => {
            config.threshold = 0;
            config.concurrency = if strategy == Strategy::MultipartSequential {
                1
            } else {
                plan.concurrency
            };
            config.memory_limit = config
                .memory_limit
                .max(plan.part_size * (config.concurrency as u64 + 1));
        }
    }
    Engine::new(store.clone(), config).map_err(|e| e.to_string())
}

/// Runs every size × strategy, `on_result` called as each finishes.
pub async fn run_strategies(
    store: Arc<dyn ObjectStore>,
    plan: &StrategyPlan,
    on_result: impl Fn(&StrategyResult),
) -> Result<Vec<StrategyResult>, BenchError> {
    plan.validate()?;
    let data = payload(*plan.sizes.iter().max().expect("validated") as usize);
    let mut results = Vec::new();
    for &size in &plan.sizes {
        for strategy in Strategy::ALL {
            let result = measure(&store, plan, strategy, size, &data).await;
            on_result(&result);
            results.push(result);
        }
    }
    Ok(results)
}

async fn measure(
    store: &Arc<dyn ObjectStore>,
    plan: &StrategyPlan,
    strategy: Strategy,
    size: u64,
    data: &Bytes,
) -> StrategyResult {
    let mut result = StrategyResult {
        size,
        strategy,
        seconds: None,
        mib_per_s: None,
        parts: 0,
        note: None,
    };
    if strategy == Strategy::SinglePut && size > limits::MAX_PUT_SIZE {
        result.note = Some("over S3's 5 GiB single-PUT limit".into());
        return result;
    }
    if strategy != Strategy::SinglePut && size == 0 {
        result.note = Some("an empty object has no parts".into());
        return result;
    }
    let engine = match engine_for(store, plan, strategy, size) {
        Ok(engine) => engine,
        Err(e) => {
            result.note = Some(e);
            return result;
        }
    };
    let mut times = Vec::new();
    for n in 0..plan.repeat {
        let key = format!("{}/{size}-{strategy:?}-{n}", plan.key_prefix).to_ascii_lowercase();
        let chunks: Vec<std::io::Result<Bytes>> = data
            .slice(..size as usize)
            .chunks(1 << 20)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let source = UploadSource::Stream {
            stream: Box::pin(futures::stream::iter(chunks)),
            length: Some(size),
        };
        let started = Instant::now();
        match engine.upload(UploadRequest::new(&key), source).await {
            Ok(outcome) => {
                times.push(started.elapsed().as_secs_f64());
                result.parts = outcome.parts;
            }
            Err(error) => {
                result.note = Some(sluice_store::error_chain(&error));
                return result;
            }
        }
        if let Err(error) = store.delete_object(&key).await {
            tracing::warn!(%key, error = %sluice_store::error_chain(&error), "could not delete a measured object");
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    result.seconds = Some(median);
    result.mib_per_s = Some(size as f64 / (1 << 20) as f64 / median.max(1e-9));
    result
}

/// The results as one table: a row per size, a column per strategy.
pub fn render(results: &[StrategyResult]) -> String {
    let mut out = format!("{:>12}", "size");
    for strategy in Strategy::ALL {
        out.push_str(&format!(" {:>26}", strategy.label()));
    }
    out.push('\n');
    let mut sizes: Vec<u64> = results.iter().map(|r| r.size).collect();
    sizes.dedup();
    for size in sizes {
        out.push_str(&format!("{:>12}", format_size(size)));
        for strategy in Strategy::ALL {
            let cell = match results
                .iter()
                .find(|r| r.size == size && r.strategy == strategy)
            {
                Some(StrategyResult {
                    seconds: Some(s),
                    mib_per_s: Some(rate),
                    ..
                }) => format!("{s:.3} s {rate:8.1} MiB/s"),
                Some(_) => "n/a".to_owned(),
                None => String::new(),
            };
            out.push_str(&format!(" {cell:>26}"));
        }
        out.push('\n');
    }
    let notes: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.note
                .as_ref()
                .map(|n| format!("  {} {}: {n}", format_size(r.size), r.strategy.label()))
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("n/a:\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_testkit::MemoryStore;

    #[tokio::test]
    async fn every_strategy_of_every_size_and_nothing_left() {
        let memory = MemoryStore::new();
        let store: Arc<dyn ObjectStore> = Arc::new(memory.clone());
        let plan = StrategyPlan {
            sizes: vec![0, 100 << 10, 11 << 20],
            part_size: 5 << 20,
            concurrency: 4,
            repeat: 2,
            key_prefix: "bench/strategies".into(),
        };
        let results = run_strategies(store.clone(), &plan, |_| {}).await.unwrap();
        assert_eq!(results.len(), 9);
        // (size, strategy, measured, parts)
        let cases = [
            (0, Strategy::SinglePut, true, 0),
            (0, Strategy::MultipartSequential, false, 0),
            (100 << 10, Strategy::SinglePut, true, 0),
            (100 << 10, Strategy::MultipartParallel, true, 1),
            (11 << 20, Strategy::SinglePut, true, 0),
            (11 << 20, Strategy::MultipartSequential, true, 3),
            (11 << 20, Strategy::MultipartParallel, true, 3),
        ];
        for (size, strategy, measured, parts) in cases {
            let r = results
                .iter()
                .find(|r| r.size == size && r.strategy == strategy)
                .unwrap();
            assert_eq!(
                r.seconds.is_some(),
                measured,
                "{size} {strategy:?}: {:?}",
                r.note
            );
            assert_eq!(r.parts, parts, "{size} {strategy:?}");
        }
        assert!(store
            .list_objects("", None, 10)
            .await
            .unwrap()
            .objects
            .is_empty());
        assert_eq!(memory.open_uploads(), 0);
        let table = render(&results);
        assert!(
            table.contains("single PUT") && table.contains("11.00 MiB"),
            "{table}"
        );
    }

    #[test]
    fn plan_bounds() {
        let ok = StrategyPlan {
            sizes: vec![1 << 20],
            part_size: 8 << 20,
            concurrency: 8,
            repeat: 1,
            key_prefix: "b".into(),
        };
        assert!(ok.validate().is_ok());
        for broken in [
            StrategyPlan {
                sizes: vec![],
                ..ok.clone()
            },
            StrategyPlan {
                sizes: vec![2 << 30],
                ..ok.clone()
            },
            StrategyPlan {
                part_size: 1 << 20,
                ..ok.clone()
            },
            StrategyPlan {
                concurrency: 0,
                ..ok.clone()
            },
            StrategyPlan {
                repeat: 0,
                ..ok.clone()
            },
        ] {
            assert!(broken.validate().is_err(), "{broken:?}");
        }
    }
}
