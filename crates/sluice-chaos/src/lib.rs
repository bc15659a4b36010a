//! sluice-chaos: a fault-injecting proxy in front of an S3 server, for tests and
//! for trying sluice against a misbehaving store (`sluice chaos-proxy`).
//!
//! It forwards path-style S3 requests to the upstream and injects, by rate and
//! per operation ([`ChaosConfig`]): 503 SlowDown with S3's XML body, 500
//! InternalError, connection resets mid-request and mid-response, added latency
//! and stalled answers; plus a per-prefix write-rate cap that answers SlowDown
//! (3,500/s by default, like S3). It counts what it did per second
//! ([`stats::Report`], also at `GET /_chaos/stats`).
//!
//! Loopback and test use only: it keeps no secrets but logs no requests either.

pub mod config;
pub mod operation;
mod proxy;
mod rate;
pub mod stats;

pub use config::{ChaosConfig, ConfigError, FaultRates};
pub use operation::Operation;
pub use proxy::{ChaosProxy, ProxyError};
