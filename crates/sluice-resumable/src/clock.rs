//! The wall clock resumable state reads: upload expiry, and the lock's lease
//! ends, which several gateways compare. Injectable, so that tests run on
//! tokio's paused time ([`TokioClock`]) instead of sleeping on the real one.

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where "now" comes from.
pub trait Clock: Send + Sync + Debug {
    fn now(&self) -> SystemTime;

    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// The system's wall clock: what gateways run on.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A wall clock that moves with tokio's time: `start` plus the tokio time
/// elapsed since the clock was made. Under `tokio::time::pause` it stands
/// still until the runtime advances it (a sleep, `tokio::time::advance`).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: SystemTime,
    at: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(start: SystemTime) -> TokioClock {
        TokioClock {
            start,
            at: tokio::time::Instant::now(),
        }
    }

    /// A clock starting at the system's now.
    pub fn now_on_tokio() -> TokioClock {
        TokioClock::new(SystemTime::now())
    }
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        self.start + tokio::time::Instant::now().saturating_duration_since(self.at)
    }
}

/// `clock`'s now plus `by`, in milliseconds since the epoch.
pub(crate) fn ms_after(clock: &dyn Clock, by: Duration) -> u64 {
    clock.now_ms() + by.as_millis() as u64
}
