//! The summary as a self-contained HTML page: the numbers of the text report and
//! four charts drawn as inline SVG (no script, no external file): uploads and MiB
//! per second, latency over time, endings stacked per second, and the latency
//! distribution by percentile.

use std::fmt::Write as _;

use crate::record::Summary;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
const MARGIN_LEFT: f64 = 64.0;
const MARGIN_BOTTOM: f64 = 36.0;
const MARGIN_TOP: f64 = 30.0;
const MARGIN_RIGHT: f64 = 16.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" upper bound for an axis.
fn nice_max(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if value <= step * magnitude {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

struct Axes {
    x_max: f64,
    y_max: f64,
}

impl Axes {
    fn x(&self, v: f64) -> f64 {
        MARGIN_LEFT + v / self.x_max * (WIDTH - MARGIN_LEFT - MARGIN_RIGHT)
    }
    fn y(&self, v: f64) -> f64 {
        HEIGHT - MARGIN_BOTTOM - v / self.y_max * (HEIGHT - MARGIN_BOTTOM - MARGIN_TOP)
    }
}

fn frame(out: &mut String, title: &str, axes: &Axes, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r##"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{t}"><text x="{MARGIN_LEFT}" y="18" class="title">{t}</text>"##,
        t = escape(title)
    );
    for i in 0..=4 {
        let v = axes.y_max * f64::from(i) / 4.0;
        let y = axes.y(v);
        let _ = write!(
            out,
            r##"<line x1="{MARGIN_LEFT}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" class="grid"/><text x="{tx:.1}" y="{ty:.1}" class="tick" text-anchor="end">{v}</text>"##,
            x2 = WIDTH - MARGIN_RIGHT,
            tx = MARGIN_LEFT - 6.0,
            ty = y + 4.0,
            v = format_tick(v)
        );
    }
    for i in 0..=4 {
        let v = axes.x_max * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<text x="{x:.1}" y="{y:.1}" class="tick" text-anchor="middle">{v}</text>"##,
            x = axes.x(v),
            y = HEIGHT - MARGIN_BOTTOM + 16.0,
            v = format_tick(v)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{x:.1}" y="{y:.1}" class="label" text-anchor="middle">{xl}</text><text x="14" y="{yy:.1}" class="label" transform="rotate(-90 14 {yy:.1})" text-anchor="middle">{yl}</text>"##,
        x = (WIDTH + MARGIN_LEFT) / 2.0,
        y = HEIGHT - 4.0,
        yy = HEIGHT / 2.0,
        xl = escape(x_label),
        yl = escape(y_label)
    );
}

fn format_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A named, coloured series of (x, y) points (or, for bars, values per second).
type Series<'a, T> = (&'a str, &'a str, Vec<T>);

/// A chart of lines; each series is (name, colour, points).
fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_, (f64, f64)>],
) -> String {
    let x_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.0))
            .fold(0.0, f64::max),
    );
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let axes = Axes { x_max, y_max };
    let mut out = String::new();
    frame(&mut out, title, &axes, x_label, y_label);
    for (i, (name, colour, points)) in series.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (j, (x, y)) in points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if j == 0 { "M" } else { "L" },
                axes.x(*x),
                axes.y(*y)
            );
        }
        let _ = write!(
            out,
            r##"<path d="{d}" fill="none" stroke="{colour}" stroke-width="2"/><rect x="{lx:.1}" y="8" width="10" height="10" fill="{colour}"/><text x="{tx:.1}" y="17" class="legend">{name}</text>"##,
            d = d.trim_end(),
            lx = WIDTH - 170.0 - 90.0 * i as f64,
            tx = WIDTH - 156.0 - 90.0 * i as f64,
            name = escape(name)
        );
    }
    out.push_str("</svg>");
    out
}

/// Stacked bars per second; each layer is (name, colour, value per second).
fn stacked_bars(title: &str, layers: &[Series<'_, f64>]) -> String {
    let seconds = layers.iter().map(|l| l.2.len()).max().unwrap_or(0);
    let totals: Vec<f64> = (0..seconds)
        .map(|i| {
            layers
                .iter()
                .map(|l| l.2.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let axes = Axes {
        x_max: nice_max(seconds as f64),
        y_max: nice_max(totals.iter().copied().fold(0.0, f64::max)),
    };
    let mut out = String::new();
    frame(&mut out, title, &axes, "second of the run", "uploads ended");
    let bar = ((axes.x(1.0) - axes.x(0.0)) * 0.8).max(1.0);
    for i in 0..seconds {
        let mut base = 0.0;
        for (_, colour, values) in layers {
            let v = values.get(i).copied().unwrap_or(0.0);
            if v > 0.0 {
                let (top, bottom) = (axes.y(base + v), axes.y(base));
                let _ = write!(
                    out,
                    r##"<rect x="{x:.1}" y="{top:.1}" width="{bar:.1}" height="{h:.1}" fill="{colour}"/>"##,
                    x = axes.x(i as f64),
                    h = (bottom - top).max(0.5)
                );
            }
            base += v;
        }
    }
    for (i, (name, colour, _)) in layers.iter().enumerate() {
        let _ = write!(
            out,
            r##"<rect x="{x:.1}" y="8" width="10" height="10" fill="{colour}"/><text x="{tx:.1}" y="17" class="legend">{name}</text>"##,
            x = WIDTH - 300.0 + 100.0 * i as f64,
            tx = WIDTH - 286.0 + 100.0 * i as f64,
            name = escape(name)
        );
    }
    out.push_str("</svg>");
    out
}

/// The page.
pub fn render_html(summary: &Summary) -> String {
    let timeline = &summary.timeline;
    let per_second = |f: &dyn Fn(&crate::record::Second) -> f64| -> Vec<(f64, f64)> {
        timeline
            .iter()
            .map(|s| (s.second as f64 + 0.5, f(s)))
            .collect()
    };
    let throughput = line_chart(
        "Throughput",
        "second of the run",
        "per second",
        &[
            ("uploads/s", "#1f77b4", per_second(&|s| s.succeeded as f64)),
            ("MiB/s", "#ff7f0e", per_second(&|s| s.mib_per_s)),
        ],
    );
    let latency = line_chart(
        "Latency of successful uploads over time",
        "second of the run",
        "seconds",
        &[
            ("mean", "#2ca02c", per_second(&|s| s.mean_latency_s)),
            ("max", "#d62728", per_second(&|s| s.max_latency_s)),
        ],
    );
    let statuses = stacked_bars(
        "Endings per second",
        &[
            (
                "succeeded",
                "#2ca02c",
                timeline.iter().map(|s| s.succeeded as f64).collect(),
            ),
            (
                "failed",
                "#d62728",
                timeline.iter().map(|s| s.failed as f64).collect(),
            ),
            (
                "503 retried",
                "#ff7f0e",
                timeline.iter().map(|s| s.retried_503 as f64).collect(),
            ),
        ],
    );
    let distribution = line_chart(
        "Latency distribution",
        "percentile",
        "seconds",
        &[(
            "latency",
            "#9467bd",
            summary
                .latency_distribution
                .iter()
                .map(|p| (p[0], p[1]))
                .collect(),
        )],
    );
    let text = escape(&summary.to_string());
    let mut endings = String::new();
    for (ending, count) in &summary.endings {
        let _ = write!(
            endings,
            "<tr><td>{}</td><td>{count}</td></tr>",
            escape(ending)
        );
    }
    let l = &summary.latency_s;
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sluice bench report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 10px; text-align: right; }}
.chart {{ display: block; margin: 12px 0; background: #fafafa; border: 1px solid #ddd; }}
.title {{ font-size: 14px; font-weight: 600; }}
.tick, .legend, .label {{ font-size: 11px; fill: #444; }}
.grid {{ stroke: #e2e2e2; }}
pre {{ background: #f4f4f4; padding: 8px; overflow-x: auto; font-size: 12px; }}
</style></head>
<body>
<h1>sluice bench</h1>
<p>{api} {url}, started {started}, {wall:.2} s</p>
<table><tr><th>uploads</th><th>succeeded</th><th>failed</th><th>not started</th><th>uploads/s</th><th>MiB/s</th></tr>
<tr><td>{uploads}</td><td>{succeeded}</td><td>{failed}</td><td>{not_started}</td><td>{ups:.1}</td><td>{mibs:.1}</td></tr></table>
<table><tr><th>p50 s</th><th>p90 s</th><th>p99 s</th><th>max s</th><th>mean s</th></tr>
<tr><td>{p50:.3}</td><td>{p90:.3}</td><td>{p99:.3}</td><td>{max:.3}</td><td>{mean:.3}</td></tr></table>
<table><tr><th>ending</th><th>count</th></tr>{endings}</table>
{throughput}
{latency}
{statuses}
{distribution}
<h2>Text report</h2>
<pre>{text}</pre>
</body></html>
"##,
        api = escape(summary.target["api"].as_str().unwrap_or("?")),
        url = escape(summary.target["url"].as_str().unwrap_or("?")),
        started = escape(&summary.started_at),
        wall = summary.wall_s,
        uploads = summary.uploads,
        succeeded = summary.succeeded,
        failed = summary.failed,
        not_started = summary.not_started,
        ups = summary.uploads_per_s,
        mibs = summary.mib_per_s,
        p50 = l.p50,
        p90 = l.p90,
        p99 = l.p99,
        max = l.max,
        mean = l.mean,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Recorder;

    #[test]
    fn nice_max_table() {
        let cases = [
            (0.0, 1.0),
            (0.7, 1.0),
            (1.3, 2.0),
            (2.2, 2.5),
            (3.0, 5.0),
            (7.0, 10.0),
            (130.0, 200.0),
            (990.0, 1000.0),
        ];
        for (value, expected) in cases {
            assert_eq!(nice_max(value), expected, "{value}");
        }
    }

    #[test]
    fn page_has_four_charts_and_escapes_text() {
        let summary = Recorder::new().summary(
            serde_json::json!({"api": "put", "url": "http://127.0.0.1/<x>"}),
            serde_json::json!({"kind": "closed", "users": 1, "iterations": 1}),
            10,
            "2026-11-22T00:00:00Z".into(),
        );
        let page = render_html(&summary);
        assert_eq!(page.matches("<svg").count(), 4);
        assert!(page.contains("http://127.0.0.1/&lt;x&gt;"));
        assert!(!page.contains("<script"));
    }
}
