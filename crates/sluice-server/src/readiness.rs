//! Readiness: whether a load balancer should send this gateway uploads now,
//! answered from what the gateway already knows (never by asking the store, so
//! `/readyz` answers at once even while the store hangs). Not ready while it
//! drains for a shutdown, or while the store counts as down: unreachable, its
//! bucket missing or its credentials refused (the engine's breaker, which the
//! start-up check, the heartbeat and every store request feed).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_upload::{Breaker, Down, DownReason};

/// Why the gateway is not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    Draining,
    Store(Down),
}

impl NotReady {
    /// The stable reason `/readyz` gives.
    pub fn code(&self) -> &'static str {
        match self {
            NotReady::Draining => "draining",
            NotReady::Store(down) => down.reason.code(),
        }
    }

    /// For `/readyz`, which anyone may ask: the store's own error (its
    /// bucket, its endpoint) stays in the log.
    pub fn message(&self) -> &'static str {
        match self {
            NotReady::Draining => "the gateway is shutting down",
            NotReady::Store(down) => match down.reason {
                DownReason::Unreachable => "the store does not answer",
                DownReason::BucketMissing => "the store's bucket does not exist",
                DownReason::CredentialsRefused => "the store refuses the gateway's credentials",
            },
        }
    }
}

#[derive(Debug, Clone)]
pub struct Readiness {
    draining: Arc<AtomicBool>,
    breaker: Option<Arc<Breaker>>,
}

impl Readiness {
    pub fn new(breaker: Option<Arc<Breaker>>) -> Readiness {
        Readiness {
            draining: Arc::new(AtomicBool::new(false)),
            breaker,
        }
    }

    /// Ready, or why not.
    pub fn check(&self) -> Result<(), NotReady> {
        if self.draining.load(Ordering::Acquire) {
            return Err(NotReady::Draining);
        }
        match self.breaker.as_ref().and_then(|b| b.down()) {
            Some(down) => Err(NotReady::Store(down)),
            None => Ok(()),
        }
    }

    /// From now on not ready: the gateway is shutting down.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}
