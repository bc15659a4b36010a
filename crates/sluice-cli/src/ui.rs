//! What a person sees: a progress bar with rate and ETA on a terminal (none when
//! stderr is not a terminal or with `--quiet`), and the one-line summary printed
//! after every transfer.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_store::Checksum;
use sluice_upload::{Progress, ProgressFn};

use sluice_upload::format_size;

/// A progress bar, or nothing.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    pub fn new(quiet: bool, total: Option<u64>) -> Bar {
        if quiet || !std::io::stderr().is_terminal() || crate::batch::active() {
            return Bar(None);
        }
        let bar = match total {
            Some(total) => ProgressBar::new(total),
            None => ProgressBar::no_length(),
        };
        let template = if total.is_some() {
            "{bar:40.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}"
        } else {
            "{spinner} {bytes} {binary_bytes_per_sec} {msg}"
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        bar.enable_steady_tick(Duration::from_millis(250));
        Bar(Some(bar))
    }

    /// The engine's progress callback driving this bar.
    pub fn callback(&self) -> Option<ProgressFn> {
        let bar = self.0.clone()?;
        Some(Arc::new(move |p: Progress| {
            if let Some(total) = p.total_bytes {
                bar.set_length(total);
            }
            bar.set_position(p.bytes_done);
            let plural = if p.parts_done == 1 { "" } else { "s" };
            bar.set_message(format!("{} part{plural}", p.parts_done));
        }))
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// `uploaded 1.00 GiB to s3://b/k in 4.21 s (243.2 MiB/s), 128 parts, crc32c:AbCd==`
/// One file's transfer with `--json`: the per-file line a directory run
/// prints, then its summary line.
pub fn json_lines(
    op: &str,
    source: &str,
    target: &str,
    size: u64,
    elapsed: Duration,
    checksum: Option<Checksum>,
) -> [serde_json::Value; 2] {
    let seconds = (elapsed.as_secs_f64() * 1000.0).round() / 1000.0;
    [
        serde_json::json!({
            "op": op,
            "source": source,
            "target": target,
            "size": size,
            "ok": true,
            "checksum": checksum.map(|c| c.to_string()),
        }),
        serde_json::json!({"summary": {
            "op": op,
            "files": 1,
            "bytes": size,
            "seconds": seconds,
            "failed": 0,
            "cancelled": 0,
        }}),
    ]
}

pub fn summary(
    verb: &str,
    size: u64,
    place: &str,
    elapsed: Duration,
    detail: &str,
    checksum: Option<Checksum>,
) -> String {
    let seconds = elapsed.as_secs_f64();
    let rate = if seconds > 0.0 {
        size as f64 / (1024.0 * 1024.0) / seconds
    } else {
        0.0
    };
    let checksum = checksum.map_or_else(|| "no checksum".to_string(), |c| c.to_string());
    format!(
        "{verb} {} {place} in {seconds:.2} s ({rate:.1} MiB/s), {detail}, {checksum}",
        format_size(size)
    )
}
