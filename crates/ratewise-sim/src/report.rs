//! Output: the text table, the JSON document and the HTML report.
//!
//! All three are pure functions of an [`ExperimentResult`], so the same
//! seed gives the same bytes. Numbers in JSON are rounded to six decimals
//! (micro-units) to keep documents readable without losing anything a
//! comparison needs.
//!
//! The HTML report is one self-contained file: inline CSS and SVG, no
//! script or font from the network. Per strategy it draws the chart Heroku
//! drew (each client's sleep value over time), the server's remaining
//! capacity, and successes vs 429s per sampling interval; the metrics table
//! is at the top. A tiny inline script (optional for viewing) counts the
//! charts that actually laid out and writes the count into
//! `data-rendered-charts` on `<body>`, which the headless-browser test
//! reads.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::engine::Trace;
use crate::metrics::{Stat, METRIC_NAMES};
use crate::{ExperimentResult, StrategyResult};

fn round6(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e6).round() / 1e6
    } else {
        0.0
    }
}

fn json_number(x: f64) -> serde_json::Value {
    let r = round6(x);
    if r.fract() == 0.0 && r.abs() < 9.0e15 {
        serde_json::Value::from(r as i64)
    } else {
        serde_json::Value::from(r)
    }
}

struct ResultJson<'a> {
    r: &'a StrategyResult,
    runs: u32,
}

impl Serialize for ResultJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        map.serialize_entry("strategy", &self.r.strategy)?;
        for name in METRIC_NAMES {
            match self.r.stat(name) {
                Some(s) => {
                    map.serialize_entry(name, &json_number(s.mean))?;
                    if self.runs > 1 {
                        map.serialize_entry(&format!("{name}_min"), &json_number(s.min))?;
                        map.serialize_entry(&format!("{name}_max"), &json_number(s.max))?;
                    }
                }
                None => map.serialize_entry(name, &serde_json::Value::Null)?,
            }
        }
        map.end()
    }
}

struct DocJson<'a>(&'a ExperimentResult);

impl Serialize for DocJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut map = ser.serialize_map(Some(4))?;
        map.serialize_entry("scenario", &e.scenario.name)?;
        map.serialize_entry("seed", &e.seed)?;
        map.serialize_entry("runs", &e.runs)?;
        let results: Vec<ResultJson<'_>> = e
            .results
            .iter()
            .map(|r| ResultJson { r, runs: e.runs })
            .collect();
        map.serialize_entry("results", &results)?;
        map.end()
    }
}

/// The JSON document `ratewise simulate --json` prints: `{"scenario", "seed", "runs",
/// "results": [{"strategy", "avg_retry_rate_pct", …}]}`; with more than one
/// run each metric also has `_min` and `_max` companions.
pub fn json(e: &ExperimentResult) -> String {
    serde_json::to_string_pretty(&DocJson(e))
        .unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}"))
}

/// One cell of the text table: `mean (min–max)` over several runs, or the
/// value of a single run. `unit` is appended to each number (`" %"`,
/// `" s"`); `"#"` marks a count, printed whole for one run and with one
/// decimal as a mean. Public so that documents quoting the table (see
/// docs/simulator.md) can be generated with exactly the CLI's formatting.
pub fn cell(s: Option<Stat>, runs: u32, unit: &str) -> String {
    // Counts (unit "#") print whole for one run and with one decimal as a
    // mean over several; everything else with two decimals.
    let (p, unit) = match unit {
        "#" if runs > 1 => (1, ""),
        "#" => (0, ""),
        u => (2, u),
    };
    match s {
        None => "—".to_owned(),
        Some(s) if runs > 1 => format!("{:.p$}{unit} ({:.p$}–{:.p$})", s.mean, s.min, s.max),
        Some(s) => format!("{:.p$}{unit}", s.mean),
    }
}

/// The columns of the text table: `(header, metric, unit)`.
const COLUMNS: [(&str, &str, &str); 8] = [
    ("Avg retry rate", "avg_retry_rate_pct", " %"),
    ("Max sleep", "max_sleep_s", " s"),
    ("Stdev req count", "stdev_request_count", ""),
    ("Time to clear", "time_to_clear_s", " s"),
    ("Utilization", "utilization", ""),
    ("Fairness", "fairness", ""),
    ("Wait p99", "wait_p99_s", " s"),
    ("429s", "throttled", "#"),
];

/// A plain-text table shaped like Heroku's (strategy, avg retry rate, max
/// sleep, stdev request count, time to clear) plus the extra metrics. With
/// several runs each cell shows `mean (min–max)`.
pub fn table(e: &ExperimentResult) -> String {
    let mut rows: Vec<Vec<String>> = vec![std::iter::once("Strategy".to_owned())
        .chain(COLUMNS.iter().map(|c| c.0.to_owned()))
        .collect()];
    for r in &e.results {
        let mut row = vec![r.strategy.clone()];
        for (_, metric, unit) in COLUMNS {
            row.push(cell(r.stat(metric), e.runs, unit));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..=COLUMNS.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} — {} (seed {}, {} run{})",
        e.scenario.name,
        e.scenario.description,
        e.seed,
        e.runs,
        if e.runs == 1 { "" } else { "s" }
    );
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(j, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                if j == 0 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    for note in identical_notes(e) {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// One sentence per strategy whose every run matched an earlier row's
/// exactly, so that a reader does not mistake a duplicate row for a result.
///
/// Two strategies tie like this when what sets them apart never came into
/// play in the scenario, typically a server signal one of them reads and
/// the server never sends (Heroku's bucket sends `RateLimit-Remaining` but
/// no `RateLimit-Reset`, and the hint pacing needs both).
pub fn identical_notes(e: &ExperimentResult) -> Vec<String> {
    let mut notes = Vec::new();
    for (i, r) in e.results.iter().enumerate() {
        let twin =
            e.results.iter().take(i).find(|o| {
                o.strategy != r.strategy && o.runs == r.runs && o.clear_runs == r.clear_runs
            });
        if let Some(o) = twin {
            notes.push(format!(
                "`{}` behaved exactly like `{}` in every run: what sets it apart never came \
                 into play here (e.g. a response header this server does not send)",
                r.strategy, o.strategy
            ));
        }
    }
    notes
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

const W: f64 = 720.0;
const H: f64 = 240.0;
const ML: f64 = 56.0;
const MR: f64 = 44.0;
const MT: f64 = 28.0;
const MB: f64 = 40.0;

/// A "nice" tick step (1, 2, 2.5 or 5 × 10^k) giving at most 6 intervals
/// up to `v`, and the axis maximum it implies.
fn nice_axis(v: f64) -> (f64, f64) {
    let v = if v.is_finite() && v > 0.0 { v } else { 1.0 };
    let raw = v / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| v / s <= 6.0)
        .unwrap_or(10.0 * p);
    (step, (v / step).ceil().max(1.0) * step)
}

struct Frame {
    x_max: f64,
    x_step: f64,
    y_max: f64,
    y_step: f64,
}

impl Frame {
    /// A frame for x in seconds (ticks in minutes) and y up to `y`.
    fn new(x_max_s: f64, y: f64) -> Frame {
        let (x_step, x_max) = nice_axis(x_max_s / 60.0);
        let (y_step, y_max) = nice_axis(y);
        Frame {
            x_max: x_max * 60.0,
            x_step: x_step * 60.0,
            y_max,
            y_step,
        }
    }
    fn x(&self, v: f64) -> f64 {
        ML + (W - ML - MR) * (v / self.x_max).clamp(0.0, 1.0)
    }
    fn y(&self, v: f64) -> f64 {
        H - MB - (H - MT - MB) * (v / self.y_max).clamp(0.0, 1.0)
    }
}

fn steps(max: f64, step: f64) -> impl Iterator<Item = f64> {
    let n = (max / step).round() as u32;
    (0..=n).map(move |i| f64::from(i) * step)
}

fn axes(out: &mut String, f: &Frame, title: &str, y_label: &str) {
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="18" class="title">{}</text>"##,
        W / 2.0,
        esc(title)
    );
    let _ = write!(
        out,
        r##"<line x1="{ML}" y1="{:.1}" x2="{:.1}" y2="{:.1}" class="axis"/><line x1="{ML}" y1="{MT}" x2="{ML}" y2="{:.1}" class="axis"/>"##,
        H - MB,
        W - MR,
        H - MB,
        H - MB
    );
    for xv in steps(f.x_max, f.x_step) {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            f.x(xv),
            H - MB + 14.0,
            fmt_tick(xv / 60.0)
        );
    }
    for yv in steps(f.y_max, f.y_step) {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text><line x1="{ML}" y1="{:.1}" x2="{:.1}" y2="{:.1}" class="grid"/>"##,
            ML - 4.0,
            f.y(yv) + 4.0,
            fmt_tick(yv),
            f.y(yv),
            W - MR,
            f.y(yv)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="label" text-anchor="middle">time (simulated minutes)</text><text x="14" y="{:.1}" class="label" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"##,
        (ML + W - MR) / 2.0,
        H - 6.0,
        H / 2.0,
        H / 2.0,
        esc(y_label)
    );
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if (v * 10.0).fract().abs() < 1e-9 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn polyline(out: &mut String, f: &Frame, xs: &[f64], ys: &[f64], color: &str, class: &str) {
    let mut pts = String::new();
    for (x, y) in xs.iter().zip(ys) {
        let _ = write!(pts, "{:.1},{:.1} ", f.x(*x), f.y(*y));
    }
    let _ = write!(
        out,
        r##"<polyline points="{}" stroke="{color}" class="{class}"/>"##,
        pts.trim_end()
    );
}

fn svg_open(out: &mut String, class: &str, strategy: &str) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart {class}" data-strategy="{}" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img">"##,
        esc(strategy)
    );
}

/// Heroku's chart: each client's last sleep value over time.
fn sleep_chart(out: &mut String, strategy: &str, t: &Trace) {
    let x_max = t.times.last().copied().unwrap_or(1.0).max(1.0);
    let y_max = t
        .sleep
        .iter()
        .flat_map(|s| s.iter().copied())
        .fold(0.0, f64::max);
    let f = Frame::new(x_max, y_max);
    svg_open(out, "sleep-chart", strategy);
    axes(
        out,
        &f,
        &format!("{strategy}: sleep values for {} clients", t.sleep.len()),
        "sleep (s)",
    );
    for (i, s) in t.sleep.iter().enumerate() {
        polyline(out, &f, &t.times, s, PALETTE[i % PALETTE.len()], "series");
    }
    out.push_str("</svg>");
}

/// Successes / 429s per interval (left axis) and the server's remaining
/// capacity (right axis, its own scale).
fn server_chart(out: &mut String, strategy: &str, t: &Trace) {
    let x_max = t.times.last().copied().unwrap_or(1.0).max(1.0);
    let counts_max = t
        .successes
        .iter()
        .chain(&t.throttled)
        .copied()
        .max()
        .unwrap_or(0) as f64;
    let rem_max = t.remaining.iter().copied().fold(0.0, f64::max);
    let f = Frame::new(x_max, counts_max);
    let fr = Frame::new(x_max, rem_max);
    svg_open(out, "server-chart", strategy);
    axes(
        out,
        &f,
        &format!("{strategy}: successes and 429s per interval; server remaining (right axis)"),
        "responses per interval",
    );
    for yv in steps(fr.y_max, fr.y_step) {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="start" fill="#555555">{}</text>"##,
            W - MR + 2.0,
            fr.y(yv) + 4.0,
            fmt_tick(yv)
        );
    }
    let ok: Vec<f64> = t.successes.iter().map(|&v| v as f64).collect();
    let bad: Vec<f64> = t.throttled.iter().map(|&v| v as f64).collect();
    polyline(
        out,
        &fr,
        &t.times,
        &t.remaining,
        "#555555",
        "series remaining",
    );
    polyline(out, &f, &t.times, &ok, "#2ca02c", "series successes");
    polyline(out, &f, &t.times, &bad, "#d62728", "series throttled");
    let _ = write!(
        out,
        r##"<g class="legend"><text x="{:.1}" y="{:.1}" fill="#555555">remaining</text><text x="{:.1}" y="{:.1}" fill="#2ca02c">successes</text><text x="{:.1}" y="{:.1}" fill="#d62728">429s</text></g>"##,
        W - 250.0,
        MT + 6.0,
        W - 170.0,
        MT + 6.0,
        W - 90.0,
        MT + 6.0
    );
    out.push_str("</svg>");
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right;white-space:nowrap}\
td:first-child,th:first-child{text-align:left}svg.chart{display:block;margin:.5em 0;background:#fff}\
.title{font-size:13px;text-anchor:middle;font-weight:600}.tick{font-size:10px;fill:#555}.label{font-size:11px;fill:#333}\
.axis{stroke:#333;stroke-width:1}.grid{stroke:#eee;stroke-width:1}.series{fill:none;stroke-width:1.2}\
.legend text{font-size:11px}section{margin-top:2em}";

const SCRIPT: &str = "(function(){var n=0;document.querySelectorAll('svg.sleep-chart').forEach(function(s){var b=s.getBBox();if(b.width>0&&b.height>0&&s.querySelectorAll('polyline').length>0){n++;}});document.body.setAttribute('data-rendered-charts',String(n));})();";

/// The self-contained HTML report.
pub fn html(e: &ExperimentResult) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ratewise simulation: {}</title><style>{CSS}</style></head><body data-strategies=\"{}\">",
        esc(&e.scenario.name),
        e.results.len()
    );
    let _ = write!(
        out,
        "<h1>ratewise simulation: {}</h1><p>{}</p><p>Server: {}. Seed {}, {} run{} per strategy; the metrics are means, with min–max over runs when there are several. Charts show the first run.</p>",
        esc(&e.scenario.name),
        esc(&e.scenario.description),
        esc(&e.scenario.server.describe()),
        e.seed,
        e.runs,
        if e.runs == 1 { "" } else { "s" }
    );
    out.push_str("<table class=\"metrics\"><thead><tr><th>Strategy</th>");
    for (h, _, _) in COLUMNS {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &e.results {
        let _ = write!(out, "<tr><td>{}</td>", esc(&r.strategy));
        for (_, metric, unit) in COLUMNS {
            let _ = write!(out, "<td>{}</td>", esc(&cell(r.stat(metric), e.runs, unit)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    for note in identical_notes(e) {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(&note));
    }
    if let Some(c) = &e.clear_scenario {
        let _ = write!(
            out,
            "<p>Time to clear comes from the companion scenario <code>{}</code>: {}</p>",
            esc(&c.name),
            esc(&c.description)
        );
    }
    for r in &e.results {
        let _ = write!(
            out,
            "<section class=\"strategy\" id=\"s-{0}\"><h2>{0}</h2>",
            esc(&r.strategy)
        );
        sleep_chart(&mut out, &r.strategy, &r.trace);
        server_chart(&mut out, &r.strategy, &r.trace);
        out.push_str("</section>");
    }
    let _ = writeln!(out, "<script>{SCRIPT}</script></body></html>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(30.0), (5.0, 30.0));
        assert_eq!(nice_axis(11.8), (2.0, 12.0));
        assert_eq!(nice_axis(0.0), (0.2, 1.0));
        assert_eq!(nice_axis(864.8), (200.0, 1000.0));
        assert_eq!(fmt_tick(2.5), "2.5");
        assert_eq!(fmt_tick(0.25), "0.25");
    }
}
