//! Why a load run could not start. Failures of individual uploads are not errors:
//! they are counted in the summary.

/// A plan that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid target URL {url:?}: {reason}")]
    InvalidTarget { url: String, reason: String },
    #[error(
        "target {url:?} resolves to {addr}, which is not a loopback address; \
         pass --allow-remote to send load to another machine"
    )]
    RemoteTarget {
        url: String,
        addr: std::net::SocketAddr,
    },
    #[error("invalid load plan: {0}")]
    InvalidPlan(String),
}
