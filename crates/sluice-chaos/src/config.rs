//! What the proxy injects: fault rates (per operation, with defaults for all),
//! added latency, how long a stall lasts, and the per-prefix write-rate cap.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::operation::Operation;

/// The chance, from 0 to 1, of each fault per request. They are exclusive: one
/// draw picks at most one, so their sum must not exceed 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultRates {
    /// 503 SlowDown with S3's XML error body, before the request reaches the store.
    pub slowdown: f64,
    /// 500 InternalError, before the request reaches the store.
    pub internal_error: f64,
    /// The connection is reset after part of the request body was read; the
    /// store never sees the request.
    pub reset_request: f64,
    /// The store handles the request, then the connection is reset before the
    /// answer (or halfway through a body) reaches the client.
    pub reset_response: f64,
    /// The store handles the request; its answer is held back for `stall_for`.
    pub stall: f64,
}

impl FaultRates {
    fn sum(&self) -> f64 {
        self.slowdown + self.internal_error + self.reset_request + self.reset_response + self.stall
    }

    fn validate(&self, what: &str) -> Result<(), ConfigError> {
        for (name, rate) in [
            ("slowdown", self.slowdown),
            ("internal_error", self.internal_error),
            ("reset_request", self.reset_request),
            ("reset_response", self.reset_response),
            ("stall", self.stall),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(ConfigError::Rate {
                    what: format!("{what} {name}"),
                    rate,
                });
            }
        }
        if self.sum() > 1.0 + 1e-9 {
            return Err(ConfigError::RateSum {
                what: what.to_string(),
                sum: self.sum(),
            });
        }
        Ok(())
    }
}

/// The proxy's behaviour; can be replaced while it runs (`PUT /_chaos/config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChaosConfig {
    /// Rates for every operation without an entry in `per_operation`.
    pub faults: FaultRates,
    /// Rates for named operations, replacing `faults` for them.
    pub per_operation: BTreeMap<Operation, FaultRates>,
    /// Added before every request is forwarded.
    #[serde(with = "millis")]
    pub latency: Duration,
    /// How long a stalled answer is held back.
    #[serde(with = "millis")]
    pub stall_for: Duration,
    /// Writes (PUT, POST, DELETE) per second allowed per prefix; above it the
    /// proxy answers SlowDown. `None` for no cap. Default 3,500, like S3.
    pub write_rate_per_prefix: Option<f64>,
    /// Path segments of the key (after the bucket) that make a prefix. Default 1.
    pub prefix_depth: usize,
    /// `Retry-After` seconds sent with injected SlowDown answers; `None` sends none
    /// (S3 sends none).
    pub retry_after: Option<u32>,
}

impl Default for ChaosConfig {
    fn default() -> Self {
        ChaosConfig {
            faults: FaultRates::default(),
            per_operation: BTreeMap::new(),
            latency: Duration::ZERO,
            stall_for: Duration::from_secs(60),
            write_rate_per_prefix: Some(3500.0),
            prefix_depth: 1,
            retry_after: None,
        }
    }
}

impl ChaosConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.faults.validate("faults")?;
        for (op, rates) in &self.per_operation {
            rates.validate(op.name())?;
        }
        if let Some(rate) = self.write_rate_per_prefix {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(ConfigError::WriteRate(rate));
            }
        }
        if self.stall_for > Duration::from_secs(3600) || self.latency > Duration::from_secs(60) {
            return Err(ConfigError::Duration);
        }
        Ok(())
    }

    /// The rates that apply to `operation`.
    pub fn rates(&self, operation: Operation) -> &FaultRates {
        self.per_operation.get(&operation).unwrap_or(&self.faults)
    }
}

/// A configuration the proxy refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{what} rate {rate} is outside 0..=1")]
    Rate { what: String, rate: f64 },
    #[error("the {what} fault rates add up to {sum}, more than 1")]
    RateSum { what: String, sum: f64 },
    #[error("write rate per prefix {0} must be a positive number")]
    WriteRate(f64),
    #[error("latency is limited to 60 s and stalls to 1 h")]
    Duration,
    #[error("{0}")]
    Invalid(String),
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_table() {
        let with = |f: fn(&mut ChaosConfig)| {
            let mut c = ChaosConfig::default();
            f(&mut c);
            c.validate().map_err(|e| e.to_string())
        };
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(
            with(|c| c.faults.slowdown = 1.5),
            Err("faults slowdown rate 1.5 is outside 0..=1".into())
        );
        assert_eq!(
            with(|c| {
                c.faults.slowdown = 0.7;
                c.faults.stall = 0.4;
            }),
            Err("the faults fault rates add up to 1.1, more than 1".into())
        );
        assert_eq!(
            with(|c| c.write_rate_per_prefix = Some(0.0)),
            Err("write rate per prefix 0 must be a positive number".into())
        );
        assert!(with(|c| {
            c.per_operation.insert(
                Operation::UploadPart,
                FaultRates {
                    reset_request: -0.1,
                    ..FaultRates::default()
                },
            );
        })
        .is_err());
    }

    #[test]
    fn per_operation_rates_replace_the_defaults() {
        let mut config = ChaosConfig::default();
        config.faults.slowdown = 0.1;
        config
            .per_operation
            .insert(Operation::CompleteMultipartUpload, FaultRates::default());
        assert_eq!(config.rates(Operation::PutObject).slowdown, 0.1);
        assert_eq!(
            config.rates(Operation::CompleteMultipartUpload).slowdown,
            0.0
        );
    }

    #[test]
    fn json_round_trip() {
        let json = r#"{"faults":{"slowdown":0.1},"per_operation":{"upload-part":{"stall":0.5}},"latency":20,"write_rate_per_prefix":500}"#;
        let config: ChaosConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.latency, Duration::from_millis(20));
        assert_eq!(config.rates(Operation::UploadPart).stall, 0.5);
        assert_eq!(config.write_rate_per_prefix, Some(500.0));
        assert!(serde_json::from_str::<ChaosConfig>(r#"{"nope":1}"#).is_err());
    }
}
