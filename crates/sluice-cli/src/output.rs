//! Results on standard output, a line at a time. A reader that goes away
//! (`sluice ls ... | head -1`) is not an error: the first failed write marks
//! standard output closed, later lines are dropped, a listing stops, transfers
//! in flight finish (so nothing is left half-uploaded), and the program exits
//! 0 without a word, as `head`'s other writers do.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes one line of results; false once the reader has gone away.
pub fn line(text: std::fmt::Arguments<'_>) -> bool {
    if CLOSED.load(Ordering::Relaxed) {
        return false;
    }
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(_) => {
            CLOSED.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// Whether standard output's reader went away: in a result line, or as the
/// cause of `error` (a download to `-`).
pub fn closed(error: Option<&anyhow::Error>) -> bool {
    CLOSED.load(Ordering::Relaxed)
        || error.is_some_and(|error| {
            error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            })
        })
}

/// `out!("...", args)`: [`line`] with `format!` arguments.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// `n` and `noun`, plural unless `n` is 1: "1 object", "3 objects".
pub fn count(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

/// `2026-11-25 07:00:00` (UTC), as aws s3 ls shows times.
pub fn listing_time(time: std::time::SystemTime) -> String {
    let text = rfc3339(time);
    text.trim_end_matches('Z').replacen('T', " ", 1)
}

/// `2026-11-25T07:00:00Z`.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}
