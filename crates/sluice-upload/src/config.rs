//! The engine's configuration, its validation (done once, before any request) and
//! the part-size plan that follows from it.

use sluice_store::limits::{
    MAX_KEY_LEN, MAX_OBJECT_SIZE, MAX_PARTS, MAX_PART_SIZE, MAX_PUT_SIZE, MIN_PART_SIZE,
};
use sluice_store::ChecksumAlgorithm;

use crate::adaptive::AdaptiveConfig;
use crate::breaker::BreakerConfig;
use crate::error::ConfigError;
use crate::retry::RetryBudgetConfig;
pub use crate::retry::RetryPolicy;
use crate::settings::EngineSettings;
use crate::tuning::TuningConfig;

pub const MIB: u64 = 1024 * 1024;

/// How uploads and downloads are cut up and paced.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Objects of at most this many bytes go up in a single PUT.
    pub threshold: u64,
    /// Size of each part (the first parts, when sizes grow).
    pub part_size: u64,
    /// Keep every part the same size (Cloudflare R2 requires it). For streams of
    /// unknown length this caps the object at `part_size` × 10,000.
    pub fixed_part_size: bool,
    /// Parts in flight per upload (and ranges per download), at most. Default 8.
    pub concurrency: usize,
    /// A limit on transfers in flight (parts, single PUTs, ranged GETs) across
    /// every upload and download of the engine, fixed or adaptive
    /// ([`crate::TuningConfig`]). `None` (the default): none beyond
    /// `concurrency` per upload.
    pub tuning: Option<TuningConfig>,
    /// Process-wide bytes of buffered data.
    pub memory_limit: u64,
    /// The most one upload holds in memory at once. `None`: a quarter of
    /// `memory_limit`, and at least what `concurrency` parts in flight plus one
    /// being read need (and what an object at the threshold needs).
    pub upload_memory_share: Option<u64>,
    /// Checksum every part carries; `None` sends none.
    pub checksum: Option<ChecksumAlgorithm>,
    pub retry: RetryPolicy,
    /// The token bucket retries draw on.
    pub retry_budget: RetryBudgetConfig,
    /// Store requests in flight per key prefix, adapted to throttling.
    pub adaptive: AdaptiveConfig,
    /// Store requests in flight in all, across every upload of the engine; more
    /// wait their turn before they count against their prefix's adaptive limit.
    /// `None`: no cap beyond the per-prefix limits.
    pub store_concurrency: Option<usize>,
    /// Stop sending requests to a store that keeps failing, and fail them at
    /// once until a probe gets an answer ([`crate::Breaker`]). `None` (the
    /// command line's default): every request retries through an outage.
    pub breaker: Option<BreakerConfig>,
    /// Flush each downloaded file to disk (fsync) before it is renamed into
    /// place. Off by default, as in cp, rsync and the S3 tools: the download
    /// then runs at the speed of the page cache, not of the disk, and a power
    /// loss soon after it can leave a file at full size with zeros inside.
    pub flush_downloads: bool,
}

impl Default for EngineConfig {
    /// The settings' defaults ([`crate::EngineSettings`], where each is
    /// defined) with eight parts in flight per upload.
    fn default() -> Self {
        EngineConfig {
            threshold: 0,
            part_size: 0,
            fixed_part_size: false,
            concurrency: 8,
            tuning: None,
            memory_limit: 0,
            upload_memory_share: None,
            checksum: None,
            retry: RetryPolicy::default(),
            retry_budget: RetryBudgetConfig::default(),
            adaptive: AdaptiveConfig::default(),
            store_concurrency: None,
            breaker: None,
            flush_downloads: false,
        }
        .with_settings(&EngineSettings::default())
    }
}

impl EngineConfig {
    /// `settings` (what users set: parts, threshold, memory, checksum) over
    /// this configuration.
    pub fn with_settings(self, settings: &EngineSettings) -> EngineConfig {
        EngineConfig {
            part_size: settings.part_size,
            fixed_part_size: settings.fixed_part_size,
            threshold: settings.threshold,
            memory_limit: settings.memory_limit,
            upload_memory_share: settings.upload_memory_share,
            checksum: settings.checksum.algorithm(),
            ..self
        }
    }
}

impl EngineConfig {
    /// Checks every bound; call once at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.part_size) {
            return Err(ConfigError::PartSize(self.part_size));
        }
        if self.threshold > MAX_PUT_SIZE {
            return Err(ConfigError::Threshold(self.threshold));
        }
        if !(1..=1024).contains(&self.concurrency) {
            return Err(ConfigError::Concurrency(self.concurrency));
        }
        let needed = self.threshold / self.part_size * self.part_size + self.part_size;
        if self.memory_limit < needed {
            return Err(ConfigError::MemoryLimit {
                limit: self.memory_limit,
                needed,
            });
        }
        if let Some(share) = self.upload_memory_share {
            if share < needed || share > self.memory_limit {
                return Err(ConfigError::MemoryShare {
                    share,
                    needed,
                    limit: self.memory_limit,
                });
            }
        }
        if let Some(tuning) = &self.tuning {
            tuning.validate().map_err(ConfigError::Tuning)?;
        }
        if self.store_concurrency == Some(0) {
            return Err(ConfigError::Concurrency(0));
        }
        if self.retry.max_attempts == 0 || self.retry.max_attempts > 100 {
            return Err(ConfigError::RetryAttempts(self.retry.max_attempts));
        }
        let adaptive = &self.adaptive;
        if adaptive.min == 0 || adaptive.max < adaptive.min || adaptive.max > 65_536 {
            return Err(ConfigError::Adaptive(
                "the limits must satisfy 1 <= min <= max <= 65536",
            ));
        }
        if !(adaptive.decrease > 0.0 && adaptive.decrease < 1.0) {
            return Err(ConfigError::Adaptive(
                "the decrease factor must be in (0, 1)",
            ));
        }
        if !(adaptive.increase > 0.0 && adaptive.increase <= 16.0) {
            return Err(ConfigError::Adaptive("the increase must be in (0, 16]"));
        }
        if !(adaptive.min_rate >= 0.1 && adaptive.min_rate <= 100_000.0) {
            return Err(ConfigError::Adaptive(
                "the minimum rate must be in [0.1, 100000] requests per second",
            ));
        }
        Ok(())
    }

    /// The most one upload holds at once; see [`EngineConfig::upload_memory_share`].
    pub fn memory_share(&self) -> u64 {
        let needed = self.threshold / self.part_size * self.part_size + self.part_size;
        // Sized for where an adaptive limit starts: the budget bounds the rest.
        let parts = self
            .tuning
            .map_or(self.concurrency, |t| t.initial.min(self.concurrency));
        let in_flight = (parts as u64 + 1).saturating_mul(self.part_size);
        self.upload_memory_share
            .unwrap_or_else(|| (self.memory_limit / 4).max(in_flight).max(needed))
            .min(self.memory_limit)
    }
}

/// Checks a key before the first request: 1–1024 bytes (a `&str` is UTF-8 already).
pub fn validate_key(key: &str) -> Result<(), ConfigError> {
    if key.is_empty() {
        return Err(ConfigError::EmptyKey);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(ConfigError::KeyTooLong(key.len()));
    }
    Ok(())
}

/// The size of each part of one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartPlan {
    base: u64,
    /// Growth stops here (5 GiB, or the memory budget for buffered sources).
    cap: u64,
    grows: bool,
}

/// With an unknown length, the part size doubles every this many parts.
const GROWTH_INTERVAL: u32 = 1000;

impl PartPlan {
    /// Parts for an object of known `length`: the configured size, raised (to a
    /// whole MiB) until the object fits in 10,000 parts.
    pub(crate) fn for_length(config: &EngineConfig, length: u64) -> Result<PartPlan, ConfigError> {
        if length > MAX_OBJECT_SIZE {
            return Err(ConfigError::ObjectTooLarge(length));
        }
        let needed = length.div_ceil(MAX_PARTS as u64).div_ceil(MIB) * MIB;
        let base = config.part_size.max(needed);
        Ok(PartPlan {
            base,
            cap: base,
            grows: false,
        })
    }

    /// Parts for a stream of unknown length: the configured size, doubling every
    /// 1,000 parts (8 MiB parts reach 5 TiB before part 10,000), never above
    /// `cap`; or always the configured size when `fixed_part_size` is set.
    pub(crate) fn for_stream(config: &EngineConfig, cap: u64) -> PartPlan {
        PartPlan {
            base: config.part_size,
            cap: cap.clamp(config.part_size, MAX_PART_SIZE),
            grows: !config.fixed_part_size,
        }
    }

    /// Size of part `number` (from 1).
    pub(crate) fn size_of(&self, number: u32) -> u64 {
        if !self.grows {
            return self.base;
        }
        let doublings = (number.saturating_sub(1) / GROWTH_INTERVAL).min(20);
        (self.base << doublings).min(self.cap)
    }

    /// The most bytes parts `1..=10,000` can hold.
    pub(crate) fn capacity(&self) -> u64 {
        (0..10)
            .map(|i| self.size_of(i * GROWTH_INTERVAL + 1) * GROWTH_INTERVAL as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_table() {
        let ok = EngineConfig::default();
        assert_eq!(ok.part_size, EngineSettings::default().part_size);
        let with = |f: fn(&mut EngineConfig)| {
            let mut c = EngineConfig::default();
            f(&mut c);
            c.validate()
        };
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(
            with(|c| c.part_size = 5 * MIB - 1),
            Err(ConfigError::PartSize(5 * MIB - 1))
        );
        assert_eq!(with(|c| c.part_size = 5 * MIB), Ok(()));
        assert_eq!(
            with(|c| c.part_size = MAX_PART_SIZE + 1),
            Err(ConfigError::PartSize(MAX_PART_SIZE + 1))
        );
        assert_eq!(
            with(|c| c.concurrency = 0),
            Err(ConfigError::Concurrency(0))
        );
        assert_eq!(
            with(|c| c.threshold = MAX_PUT_SIZE + 1),
            Err(ConfigError::Threshold(MAX_PUT_SIZE + 1))
        );
        assert_eq!(
            with(|c| c.memory_limit = 16 * MIB),
            Err(ConfigError::MemoryLimit {
                limit: 16 * MIB,
                needed: 32 * MIB
            })
        );
        assert_eq!(
            with(|c| c.retry.max_attempts = 0),
            Err(ConfigError::RetryAttempts(0))
        );
        // The adaptive limiter's settings: (change, valid)
        type Change = fn(&mut EngineConfig);
        let adaptive: [(Change, bool); 7] = [
            (|c| c.adaptive.min = 0, false),
            (|c| c.adaptive.max = 65_537, false),
            (|c| c.adaptive.decrease = 1.0, false),
            (|c| c.adaptive.increase = 0.0, false),
            (|c| c.adaptive.min_rate = 0.0, false),
            (|c| c.adaptive.min_rate = 0.5, true),
            (|c| c.adaptive.enabled = false, true),
        ];
        for (i, (change, valid)) in adaptive.into_iter().enumerate() {
            let result = with(change);
            assert_eq!(result.is_ok(), valid, "case {i}: {result:?}");
        }
        // The limit on transfers in flight: (initial, min, max, valid)
        let tuning = [
            (8, 2, 64, true),
            (1, 1, 1, true),
            (1024, 1024, 1024, true),
            (0, 0, 0, false),
            (2, 4, 64, false),
            (65, 2, 64, false),
            (8, 2, 1025, false),
        ];
        for (initial, min, max, valid) in tuning {
            let result = EngineConfig {
                tuning: Some(TuningConfig { initial, min, max }),
                ..EngineConfig::default()
            }
            .validate();
            assert_eq!(result.is_ok(), valid, "{initial}/{min}/{max}: {result:?}");
        }
    }

    #[test]
    fn keys() {
        assert_eq!(validate_key(""), Err(ConfigError::EmptyKey));
        assert_eq!(validate_key("a"), Ok(()));
        assert_eq!(validate_key(&"k".repeat(1024)), Ok(()));
        assert_eq!(
            validate_key(&"k".repeat(1025)),
            Err(ConfigError::KeyTooLong(1025))
        );
    }

    #[test]
    fn known_length_fits_in_ten_thousand_parts() {
        let config = EngineConfig {
            part_size: 8 * MIB,
            ..EngineConfig::default()
        };
        let cases = [
            (0, 8 * MIB),
            (100 * MIB, 8 * MIB),
            (80_000 * MIB, 8 * MIB),
            (80_000 * MIB + 1, 9 * MIB),
            (MAX_OBJECT_SIZE, 525 * MIB),
        ];
        for (length, part) in cases {
            let plan = PartPlan::for_length(&config, length).unwrap();
            assert_eq!(plan.size_of(1), part, "length {length}");
            assert!(length.div_ceil(part) <= MAX_PARTS as u64);
        }
        assert_eq!(
            PartPlan::for_length(&config, MAX_OBJECT_SIZE + 1),
            Err(ConfigError::ObjectTooLarge(MAX_OBJECT_SIZE + 1))
        );
    }

    #[test]
    fn stream_parts_grow_to_reach_the_maximum_object() {
        let config = EngineConfig {
            part_size: 8 * MIB,
            ..EngineConfig::default()
        };
        let plan = PartPlan::for_stream(&config, MAX_PART_SIZE);
        let sizes: Vec<u64> = [1, 1000, 1001, 2001, 9001, 10_000]
            .iter()
            .map(|&n| plan.size_of(n))
            .collect();
        assert_eq!(
            sizes,
            vec![8 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 4096 * MIB, 4096 * MIB]
        );
        assert!(plan.capacity() >= MAX_OBJECT_SIZE);

        let capped = PartPlan::for_stream(&config, 256 * MIB);
        assert_eq!(capped.size_of(9001), 256 * MIB);

        let fixed = PartPlan::for_stream(
            &EngineConfig {
                fixed_part_size: true,
                ..config
            },
            MAX_PART_SIZE,
        );
        assert_eq!(fixed.size_of(9001), 8 * MIB);
        assert_eq!(fixed.capacity(), 80_000 * MIB);
    }
}
