//! The summary as text: what ran, endings by status and error kind, rates, latency
//! percentiles and the per-second timeline.

use std::fmt::{self, Write as _};

use sluice_upload::format_size;

use crate::record::Summary;

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let api = self.target["api"].as_str().unwrap_or("?");
        let url = self.target["url"].as_str().unwrap_or("?");
        let model = match self.model["kind"].as_str() {
            Some("closed") => {
                let bound = match (
                    self.model["iterations"].as_u64(),
                    self.model["duration_s"].as_f64(),
                ) {
                    (Some(n), _) => format!("{n} upload(s) each"),
                    (_, Some(d)) => format!("for {d} s"),
                    _ => String::new(),
                };
                format!("closed model, {} users, {bound}", self.model["users"])
            }
            Some("open") => format!(
                "open model, {}/s for {} s, at most {} in flight",
                self.model["rate"], self.model["duration_s"], self.model["max_in_flight"]
            ),
            _ => "unknown model".into(),
        };
        let sizes = match self.min_object_size {
            Some(min) => format!(
                "{}..{} (log-uniform)",
                format_size(min),
                format_size(self.object_size)
            ),
            None => format_size(self.object_size),
        };
        let _ = writeln!(out, "{api} {url}: {model}, {sizes} objects");
        let rate = if self.uploads > 0 {
            self.succeeded as f64 / self.uploads as f64 * 100.0
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "uploads     {} in {:.2} s: {} succeeded ({rate:.2}%), {} failed{}",
            self.uploads,
            self.wall_s,
            self.succeeded,
            self.failed,
            if self.not_started > 0 {
                format!(
                    ", {} arrivals not started (max in flight)",
                    self.not_started
                )
            } else {
                String::new()
            }
        );
        let endings: Vec<String> = self
            .endings
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = writeln!(out, "endings     {}", endings.join(", "));
        if self.retried_503 > 0 {
            let _ = writeln!(
                out,
                "retries     {} answers 503 retried after Retry-After; {} uploads succeeded after a retry",
                self.retried_503, self.succeeded_after_retry
            );
        }
        let _ = writeln!(
            out,
            "throughput  {:.1} uploads/s, {:.1} MiB/s",
            self.uploads_per_s, self.mib_per_s
        );
        let l = &self.latency_s;
        let _ = writeln!(
            out,
            "latency     p50 {:.3} s   p90 {:.3} s   p99 {:.3} s   max {:.3} s   mean {:.3} s",
            l.p50, l.p90, l.p99, l.max, l.mean
        );
        let _ = writeln!(
            out,
            "\n{:>6} {:>8} {:>10} {:>8} {:>8} {:>10} {:>10} {:>9}",
            "second", "started", "succeeded", "failed", "503s", "mean s", "max s", "MiB/s"
        );
        for s in &self.timeline {
            let _ = writeln!(
                out,
                "{:>6} {:>8} {:>10} {:>8} {:>8} {:>10.3} {:>10.3} {:>9.1}",
                s.second,
                s.started,
                s.succeeded,
                s.failed,
                s.retried_503,
                s.mean_latency_s,
                s.max_latency_s,
                s.mib_per_s
            );
        }
        f.write_str(&out)
    }
}
