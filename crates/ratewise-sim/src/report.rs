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
use crate::rank;
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
    ranked: Option<&'a rank::Ranked>,
}

impl Serialize for ResultJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        map.serialize_entry("strategy", &self.r.strategy)?;
        if let Some(rk) = self.ranked {
            map.serialize_entry("rank", &rk.rank)?;
            map.serialize_entry("pareto_tier", &rk.tier)?;
            let flags: Vec<&str> = rk
                .flags
                .iter()
                .map(|f| match f {
                    rank::Flag::NeverWaits { .. } => "never_waits",
                    rank::Flag::GaveUp { .. } => "gave_up_calls",
                })
                .collect();
            map.serialize_entry("flags", &flags)?;
        }
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
        let ranked = rank::rank(e);
        let by_index = ranked_by_index(&ranked, e.results.len());
        let results: Vec<ResultJson<'_>> = e
            .results
            .iter()
            .zip(by_index)
            .map(|(r, ranked)| ResultJson {
                r,
                runs: e.runs,
                ranked,
            })
            .collect();
        map.serialize_entry("results", &results)?;
        map.end()
    }
}

/// The JSON document `ratewise simulate --json` prints: `{"scenario", "seed", "runs",
/// "results": [{"strategy", "rank", "pareto_tier", "flags", "avg_retry_rate_pct", …}]}`
/// in the order the strategies were asked for (`rank` is the place by
/// [`rank::RULE`], `flags` any of `never_waits`, `gave_up_calls`); with more
/// than one run each metric also has `_min` and `_max` companions.
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

/// The widest the default table may be, in columns.
pub const TABLE_WIDTH: usize = 120;

/// Words of `text` wrapped to `width` columns, each line after the first
/// indented by `indent` spaces.
fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    // Leading spaces are kept: they indent the first line.
    let mut line: String = text.chars().take_while(|c| *c == ' ').collect();
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
        } else if !line.trim_start().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(line.trim_end());
    out
}

/// The strategy column: name, `(default)` for the default strategy, `!`
/// when flagged.
fn strategy_label(name: &str, ranked: &rank::Ranked) -> String {
    let mut s = name.to_owned();
    if name == rank::DEFAULT_STRATEGY {
        s.push_str(" (default)");
    }
    if !ranked.flags.is_empty() {
        s.push_str(" !");
    }
    s
}

/// A metric's cell, or `n/a` where a strategy that never waits would look
/// perfect (its waits and fairness say nothing about it).
fn metric_cell(
    r: &StrategyResult,
    ranked: &rank::Ranked,
    m: &rank::MetricDef,
    runs: u32,
    spread: bool,
) -> String {
    if ranked.never_waits() && matches!(m.key, "max_sleep_s" | "wait_p99_s" | "fairness") {
        return "n/a".to_owned();
    }
    let s = r.stat(m.key);
    if spread {
        cell(s, runs, m.unit)
    } else {
        // Means only: the spread doubles the width.
        cell(
            s.map(|s| Stat {
                min: s.mean,
                max: s.mean,
                ..s
            }),
            1,
            if m.unit == "#" && runs > 1 {
                ""
            } else {
                m.unit
            },
        )
    }
}

/// The text table, means only, at most [`TABLE_WIDTH`] columns wide: see
/// [`table_with`].
pub fn table(e: &ExperimentResult) -> String {
    table_with(e, false)
}

/// The terminal report. It opens with the answer (the best strategy by
/// [`rank::RULE`], the Pareto front, where the default landed) and the rule
/// itself, then a table of every strategy, best first: `#` is the rank
/// (`*` on the Pareto front), `!` flags a strategy whose numbers must not be
/// read at face value (explained under the table), and every column is
/// defined under it with its direction. With `spread` and several runs each
/// cell shows `mean (min–max)`, which is wider than [`TABLE_WIDTH`].
pub fn table_with(e: &ExperimentResult, spread: bool) -> String {
    let ranked = rank::rank(e);
    let mut rows: Vec<Vec<String>> = vec![["#", "Strategy"]
        .iter()
        .map(|h| (*h).to_owned())
        .chain(
            rank::METRICS
                .iter()
                .map(|m| format!("{} {}", m.short, m.direction.arrow())),
        )
        .collect()];
    for rk in &ranked {
        let r = &e.results[rk.index];
        let mut row = vec![
            format!(
                "{}{}",
                rk.rank,
                if rk.tier == 1 && !rk.never_waits() {
                    "*"
                } else {
                    ""
                }
            ),
            strategy_label(&r.strategy, rk),
        ];
        for m in &rank::METRICS {
            row.push(metric_cell(r, rk, m, e.runs, spread));
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
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
        "{}",
        wrap(
            &format!(
                "{} — {} (seed {}, {} run{}{})",
                e.scenario.name,
                e.scenario.description,
                e.seed,
                e.runs,
                if e.runs == 1 { "" } else { "s" },
                if e.runs > 1 && !spread {
                    "; means, --spread adds min–max"
                } else {
                    ""
                }
            ),
            TABLE_WIDTH,
            2
        )
    );
    let _ = writeln!(out, "{}", wrap(&rank::answer(e, &ranked), TABLE_WIDTH, 2));
    let _ = writeln!(
        out,
        "{}",
        wrap(&format!("Rule: {}.", rank::RULE), TABLE_WIDTH, 2)
    );
    let _ = writeln!(
        out,
        "{}",
        wrap(&format!("{}.", rank::never_dominated_aim()), TABLE_WIDTH, 2)
    );
    let _ = writeln!(out);
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(j, (c, w))| {
                let pad = w.saturating_sub(c.chars().count());
                if j == 1 {
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
    let _ = writeln!(
        out,
        "* on the Pareto front of retry rate and time to clear.  ! flagged:"
    );
    let mut gave_up = Vec::new();
    for rk in &ranked {
        let r = &e.results[rk.index];
        for f in &rk.flags {
            match f {
                rank::Flag::NeverWaits { .. } => {
                    let _ = writeln!(
                        out,
                        "{}",
                        wrap(&format!("  ! {}", f.explain(&r.strategy)), TABLE_WIDTH, 4)
                    );
                }
                rank::Flag::GaveUp { failed_calls } => {
                    gave_up.push(format!("{} {failed_calls:.0}", r.strategy));
                }
            }
        }
    }
    if !gave_up.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!(
                    "  ! gave up calls (ended without success; a fixed job retries the item in the next call): {}",
                    gave_up.join(", ")
                ),
                TABLE_WIDTH,
                4
            )
        );
    }
    for note in identical_notes(e) {
        let _ = writeln!(out, "{}", wrap(&format!("note: {note}"), TABLE_WIDTH, 2));
    }
    let _ = writeln!(out, "Metrics (↓ lower is better, ↑ higher is better):");
    for m in &rank::METRICS {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!(
                    "  {} {} — {}: {}",
                    m.short,
                    m.direction.arrow(),
                    m.name,
                    m.definition
                ),
                TABLE_WIDTH,
                4
            )
        );
    }
    if let Some(c) = &e.clear_scenario {
        let _ = writeln!(
            out,
            "{}",
            wrap(
                &format!(
                    "  Time to clear comes from the companion scenario `{}`: {}",
                    c.name, c.description
                ),
                TABLE_WIDTH,
                4
            )
        );
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

/// Escapes text for HTML (the overload report uses it too).
pub(crate) fn esc(s: &str) -> String {
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
const H: f64 = 250.0;
const ML: f64 = 56.0;
const MR: f64 = 56.0;
/// Top margin: the title (y = 16) and the legend (y = 32) sit above the
/// plot area, never over the data.
const MT: f64 = 42.0;
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

/// As [`nice_axis`] for a count: whole-number steps (1, 2 or 5 × 10^k).
fn count_axis(v: f64) -> (f64, f64) {
    let v = if v.is_finite() && v > 0.0 { v } else { 1.0 };
    let mut p = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let step = m * p;
            if v / step <= 6.0 {
                return (step, (v / step).ceil().max(1.0) * step);
            }
        }
        p *= 10.0;
    }
}

struct Frame {
    x_max: f64,
    x_step: f64,
    y_max: f64,
    y_step: f64,
}

impl Frame {
    /// A frame for x in seconds (ticks in minutes) and y up to `y` on the
    /// scale `axis` makes.
    fn new(x_max_s: f64, y: f64, axis: fn(f64) -> (f64, f64)) -> Frame {
        let (x_step, x_max) = nice_axis(x_max_s / 60.0);
        let (y_step, y_max) = axis(y);
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

/// A chart's title (in the top margin) and its two axis lines, for a
/// `w × h` chart whose plot area has margins `left`, `right`, `top`,
/// `bottom`.
fn title_and_axes(
    out: &mut String,
    title: &str,
    w: f64,
    h: f64,
    [left, right, top, bottom]: [f64; 4],
) {
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="16" class="title">{}</text><line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" class="axis"/><line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" class="axis"/>"##,
        w / 2.0,
        esc(title),
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
}

fn axes(out: &mut String, f: &Frame, title: &str, y_label: &str) {
    title_and_axes(out, title, W, H, [ML, MR, MT, MB]);
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

/// A legend in the top margin, right-aligned: `(label, colour)` pairs.
fn legend(out: &mut String, width: f64, items: &[(&str, &str)]) {
    out.push_str(r#"<g class="legend">"#);
    let mut x = width - 8.0;
    for (label, color) in items.iter().rev() {
        let w = 7.0 * label.chars().count() as f64 + 18.0;
        x -= w;
        let _ = write!(
            out,
            r##"<rect x="{:.1}" y="26" width="10" height="4" fill="{color}"/><text x="{:.1}" y="32" fill="#333">{}</text>"##,
            x,
            x + 13.0,
            esc(label)
        );
    }
    out.push_str("</g>");
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

fn svg_open(out: &mut String, class: &str, strategy: &str, w: f64, h: f64) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart {class}" data-strategy="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">"##,
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
    let f = Frame::new(x_max, y_max, nice_axis);
    svg_open(out, "sleep-chart", strategy, W, H);
    axes(
        out,
        &f,
        &if t.sleep.len() < t.clients {
            format!(
                "{strategy}: the sleep {} of {} clients (spread evenly) last asked for",
                t.sleep.len(),
                t.clients
            )
        } else {
            format!(
                "{strategy}: the sleep each of {} clients last asked for",
                t.sleep.len()
            )
        },
        "sleep (s)",
    );
    for (i, s) in t.sleep.iter().enumerate() {
        polyline(out, &f, &t.times, s, PALETTE[i % PALETTE.len()], "series");
    }
    out.push_str("</svg>");
}

/// Successes / 429s per sampling interval (left axis) and the server's
/// remaining capacity (right axis, its own scale, in requests).
fn server_chart(out: &mut String, strategy: &str, t: &Trace, interval_s: f64) {
    let x_max = t.times.last().copied().unwrap_or(1.0).max(1.0);
    let counts_max = t
        .successes
        .iter()
        .chain(&t.throttled)
        .copied()
        .max()
        .unwrap_or(0) as f64;
    let rem_max = t.remaining.iter().copied().fold(0.0, f64::max);
    let f = Frame::new(x_max, counts_max, count_axis);
    let fr = Frame::new(x_max, rem_max, count_axis);
    svg_open(out, "server-chart", strategy, W, H);
    let per = format!("per {} s interval", fmt_tick(interval_s));
    axes(
        out,
        &f,
        &format!("{strategy}: responses {per}; server capacity left"),
        &format!("responses {per}"),
    );
    for yv in steps(fr.y_max, fr.y_step) {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="start" fill="#555555">{}</text>"##,
            W - MR + 4.0,
            fr.y(yv) + 4.0,
            fmt_tick(yv)
        );
    }
    let _ = write!(
        out,
        r##"<line x1="{:.1}" y1="{MT}" x2="{:.1}" y2="{:.1}" class="axis"/><text x="{:.1}" y="{:.1}" class="label" text-anchor="middle" transform="rotate(90 {:.1} {:.1})">server capacity left (requests)</text>"##,
        W - MR,
        W - MR,
        H - MB,
        W - 10.0,
        H / 2.0,
        W - 10.0,
        H / 2.0
    );
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
    legend(
        out,
        W,
        &[
            ("successes (left)", "#2ca02c"),
            ("429s (left)", "#d62728"),
            ("capacity left (right)", "#555555"),
        ],
    );
    out.push_str("</svg>");
}

/// One strategy on a comparison chart.
struct Point<'a> {
    name: &'a str,
    x: f64,
    /// `None`: off the chart's y scale (did not clear), drawn in a band
    /// above the plot.
    y: Option<f64>,
    default: bool,
    flagged: bool,
}

/// An axis of a comparison chart: linear from `lo` to `hi`, or log10.
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl Scale {
    fn linear(min: f64, max: f64) -> Scale {
        let span = (max - min).max(max.abs() * 0.05).max(1e-9);
        let (step, _) = nice_axis(span);
        let lo = (min / step).floor() * step;
        let hi = ((max / step).ceil() * step).max(lo + step);
        Scale {
            lo,
            hi,
            log: false,
            ticks: steps(hi - lo, step).map(|v| lo + v).collect(),
        }
    }
    fn log(min: f64, max: f64) -> Scale {
        let lo = 10f64.powf(min.max(1e-3).log10().floor());
        let hi = 10f64
            .powf(max.max(min).max(1e-3).log10().ceil())
            .max(lo * 10.0);
        let mut ticks = Vec::new();
        let mut t = lo;
        while t <= hi * 1.0001 {
            ticks.push(t);
            t *= 10.0;
        }
        Scale {
            lo,
            hi,
            log: true,
            ticks,
        }
    }
    /// 0 at `lo`, 1 at `hi`.
    fn unit(&self, v: f64) -> f64 {
        let u = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        u.clamp(0.0, 1.0)
    }
}

const SW: f64 = 720.0;
const SH: f64 = 430.0;
const SMT: f64 = 64.0;
const SMB: f64 = 58.0;
const SML: f64 = 64.0;
const SMR: f64 = 24.0;

/// A scatter of every strategy: the default ringed and labelled, flagged
/// ones hollow, and `front` (indices into `points`) joined as a staircase.
#[allow(clippy::too_many_arguments)]
fn scatter(
    out: &mut String,
    class: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    better: &str,
    points: &[Point<'_>],
    front: &[usize],
    xs: &Scale,
    ys: &Scale,
    legend_items: &[(&str, &str)],
) {
    let px = |v: f64| SML + (SW - SML - SMR) * xs.unit(v);
    let band = SMT - 12.0;
    let py = |v: Option<f64>| v.map_or(band, |v| SH - SMB - (SH - SMT - SMB) * ys.unit(v));
    svg_open(out, class, "", SW, SH);
    title_and_axes(out, title, SW, SH, [SML, SMR, SMT, SMB]);
    for &t in &xs.ticks {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text><line x1="{:.1}" y1="{SMT}" x2="{:.1}" y2="{:.1}" class="grid"/>"##,
            px(t),
            SH - SMB + 14.0,
            fmt_tick(t),
            px(t),
            px(t),
            SH - SMB
        );
    }
    for &t in &ys.ticks {
        let y = py(Some(t));
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text><line x1="{SML}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" class="grid"/>"##,
            SML - 4.0,
            y + 4.0,
            fmt_tick(t),
            SW - SMR
        );
    }
    if points.iter().any(|p| p.y.is_none()) {
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">did not clear ↑</text><line x1="{SML}" y1="{band:.1}" x2="{:.1}" y2="{band:.1}" class="grid"/>"##,
            SW - SMR,
            band - 4.0,
            SW - SMR
        );
    }
    let _ = write!(
        out,
        r##"<text x="{:.1}" y="{:.1}" class="label" text-anchor="middle">{}</text><text x="14" y="{:.1}" class="label" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text><text x="{:.1}" y="{:.1}" class="label better" text-anchor="end">{}</text>"##,
        (SML + SW - SMR) / 2.0,
        SH - SMB + 28.0,
        esc(x_label),
        (SH + SMT - SMB) / 2.0,
        (SH + SMT - SMB) / 2.0,
        esc(y_label),
        SW - SMR,
        SH - 10.0,
        esc(better)
    );
    legend(out, SW, legend_items);
    // The front: an orange ring round each of its points, joined by a
    // staircase (sorted by x) when it has several.
    let mut f: Vec<(f64, f64)> = front
        .iter()
        .filter_map(|&i| points.get(i))
        .filter(|p| p.y.is_some())
        .map(|p| (px(p.x), py(p.y)))
        .collect();
    f.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut d = String::new();
    for (i, (x, y)) in f.iter().enumerate() {
        if i == 0 {
            let _ = write!(d, "M{x:.1},{y:.1}");
        } else {
            let _ = write!(d, " L{x:.1},{:.1} L{x:.1},{y:.1}", f[i - 1].1);
        }
    }
    if f.len() > 1 {
        let _ = write!(
            out,
            r##"<path d="{d}" class="front" fill="none" stroke="#ff7f0e" stroke-width="2"/>"##
        );
    }
    for (x, y) in &f {
        let _ = write!(
            out,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="10" class="front" fill="none" stroke="#ff7f0e" stroke-width="2.5"/>"##
        );
    }
    // Points first, then labels placed greedily where they overlap nothing
    // already drawn (points included).
    let mut taken: Vec<(f64, f64, f64, f64)> = points
        .iter()
        .map(|p| {
            let (x, y) = (px(p.x), py(p.y));
            (x - 5.0, y - 5.0, x + 5.0, y + 5.0)
        })
        .collect();
    for (i, p) in points.iter().enumerate() {
        let (x, y) = (px(p.x), py(p.y));
        let color = if p.default {
            "#111111"
        } else {
            PALETTE[i % PALETTE.len()]
        };
        let label = if p.default {
            format!("{} (default)", p.name)
        } else {
            p.name.to_owned()
        };
        let w = 6.2 * label.chars().count() as f64;
        let mut candidates = Vec::new();
        for dy in [
            4.0, -8.0, 16.0, -20.0, 28.0, -32.0, 40.0, -44.0, 52.0, -56.0, 64.0, -68.0,
        ] {
            candidates.push((8.0, dy));
            candidates.push((-8.0 - w, dy));
        }
        let inside = |bx: f64, by: f64| {
            bx >= SML + 2.0 && bx + w <= SW && by - 10.0 >= SMT - 4.0 && by <= SH - SMB - 2.0
        };
        let free = |bx: f64, by: f64, taken: &[(f64, f64, f64, f64)]| {
            taken
                .iter()
                .all(|&(x0, y0, x1, y1)| bx + w < x0 || bx > x1 || by < y0 || by - 10.0 > y1)
        };
        let (lx, ly) = candidates
            .iter()
            .map(|(dx, dy)| (x + dx, y + dy))
            .find(|&(bx, by)| inside(bx, by) && free(bx, by, &taken))
            .unwrap_or((x + 8.0, y + 4.0));
        if (ly - 4.0 - y).abs() > 14.0 {
            // A label moved away from its dot gets a leader line.
            let ex = if lx > x { lx } else { lx + w };
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{y:.1}" x2="{ex:.1}" y2="{:.1}" class="leader"/>"##,
                ly - 4.0
            );
        }
        taken.push((lx, ly - 10.0, lx + w, ly));
        let (r, fill, stroke) = match (p.default, p.flagged) {
            (true, _) => (7.0, color, "#111111"),
            (false, true) => (4.5, "#ffffff", color),
            (false, false) => (4.5, color, color),
        };
        let _ = write!(
            out,
            r##"<g class="point{}" data-strategy="{}"><circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{fill}" stroke="{stroke}" stroke-width="{}"/><text x="{lx:.1}" y="{ly:.1}" class="point-label"{}>{}</text></g>"##,
            if p.default { " default" } else { "" },
            esc(p.name),
            if p.default { "3" } else { "1.5" },
            if p.default {
                r#" font-weight="700""#
            } else {
                ""
            },
            esc(&label)
        );
    }
    out.push_str("</svg>");
}

/// The page's first figure: every strategy by retry rate and time to
/// clear, the default highlighted, the Pareto front drawn.
fn decision_chart(out: &mut String, e: &ExperimentResult, ranked: &[rank::Ranked]) {
    let mean = |r: &StrategyResult, k: &str| r.stat(k).map(|s| s.mean);
    let points: Vec<Point<'_>> = e
        .results
        .iter()
        .zip(ranked_by_index(ranked, e.results.len()))
        .map(|(r, rk)| Point {
            name: &r.strategy,
            x: mean(r, "avg_retry_rate_pct").unwrap_or(0.0),
            y: mean(r, "time_to_clear_s"),
            default: r.strategy == rank::DEFAULT_STRATEGY,
            flagged: rk.is_some_and(|k| !k.flags.is_empty()),
        })
        .collect();
    let front: Vec<usize> = ranked
        .iter()
        .filter(|r| r.tier == 1 && !r.never_waits())
        .map(|r| r.index)
        .collect();
    let ys: Vec<f64> = points.iter().filter_map(|p| p.y).collect();
    let (lo, hi) = ys
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let y_scale = if ys.is_empty() {
        Scale::linear(0.0, 1.0)
    } else {
        Scale::linear(lo, hi)
    };
    let x_max = points.iter().map(|p| p.x).fold(0.0, f64::max);
    scatter(
        out,
        "decision-chart",
        &format!(
            "Figure 1. Every strategy: retry rate against time to clear ({} run{})",
            e.runs,
            if e.runs == 1 { "" } else { "s, means" }
        ),
        "avg retry rate (%) — lower is better",
        "time to clear (s) — lower is better",
        "↙ better: fewer retries and sooner done",
        &points,
        &front,
        &Scale::linear(0.0, x_max.max(1.0)),
        &y_scale,
        &[
            ("Pareto front (ringed)", "#ff7f0e"),
            ("default (large, black)", "#111111"),
            ("flagged (hollow)", "#999999"),
        ],
    );
}

/// The second figure: max sleep (log scale) against fairness; strategies
/// that never wait have neither and are left out.
fn tradeoff_chart(out: &mut String, e: &ExperimentResult, ranked: &[rank::Ranked]) {
    let mean = |r: &StrategyResult, k: &str| r.stat(k).map(|s| s.mean);
    let points: Vec<Point<'_>> = e
        .results
        .iter()
        .zip(ranked_by_index(ranked, e.results.len()))
        .filter(|(_, rk)| !rk.is_some_and(rank::Ranked::never_waits))
        .map(|(r, rk)| Point {
            name: &r.strategy,
            x: mean(r, "max_sleep_s").unwrap_or(0.0).max(0.01),
            y: mean(r, "fairness"),
            default: r.strategy == rank::DEFAULT_STRATEGY,
            flagged: rk.is_some_and(|k| !k.flags.is_empty()),
        })
        .collect();
    let x_min = points.iter().map(|p| p.x).fold(f64::INFINITY, f64::min);
    let x_max = points.iter().map(|p| p.x).fold(0.0, f64::max);
    scatter(
        out,
        "tradeoff-chart",
        "Figure 2. Max sleep against fairness (strategies that never wait left out)",
        "max sleep (s, log scale) — lower is better",
        "fairness (Jain) — higher is better",
        "↖ better: short sleeps, equal shares",
        &points,
        &[],
        &Scale::log(x_min.min(x_max), x_max.max(1.0)),
        &Scale::linear(0.0, 1.0),
        &[
            ("default (large, black)", "#111111"),
            ("flagged (hollow)", "#999999"),
        ],
    );
}

/// `ranked` looked up by result index.
fn ranked_by_index(ranked: &[rank::Ranked], n: usize) -> Vec<Option<&rank::Ranked>> {
    let mut v = vec![None; n];
    for r in ranked {
        if let Some(slot) = v.get_mut(r.index) {
            *slot = Some(r);
        }
    }
    v
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right;white-space:nowrap}\
td:nth-child(2),th:nth-child(2){text-align:left}tr.default td{font-weight:700;background:#fff6e0}tr.flagged td:nth-child(2){color:#a33}\
svg.chart{display:block;margin:.5em 0;background:#fff}figure{margin:1em 0}figcaption{font-size:13px;color:#444;max-width:720px}\
.title{font-size:13px;text-anchor:middle;font-weight:600}.tick{font-size:10px;fill:#555}.label{font-size:11px;fill:#333}.better{fill:#777}\
.point-label{font-size:10px;fill:#222}.leader{stroke:#bbb;stroke-width:.8}.axis{stroke:#333;stroke-width:1}.grid{stroke:#eee;stroke-width:1}.series{fill:none;stroke-width:1.2}\
.legend text{font-size:11px}section{margin-top:2em}.answer{font-size:18px;margin:.4em 0}.rule{color:#444;max-width:900px}\
dl.metrics dt{font-weight:600;float:left;clear:left;width:11em}dl.metrics dd{margin-left:12em;margin-bottom:.2em}";

const SCRIPT: &str = "(function(){var n=0;document.querySelectorAll('svg.sleep-chart').forEach(function(s){var b=s.getBBox();if(b.width>0&&b.height>0&&s.querySelectorAll('polyline').length>0){n++;}});\
document.body.setAttribute('data-rendered-charts',String(n));\
var first=document.querySelector('svg.chart');document.body.setAttribute('data-first-chart',first?first.getAttribute('class'):'');\
var p=0;document.querySelectorAll('svg.decision-chart g.point').forEach(function(g){var b=g.getBBox();if(b.width>0&&b.height>0){p++;}});\
document.body.setAttribute('data-decision-points',String(p));})();";

/// The self-contained HTML report. It opens with the answer and the rule
/// ([`rank::RULE`]), then Figure 1 — every strategy by retry rate and time
/// to clear, the default highlighted and the Pareto front drawn — and
/// Figure 2 (max sleep against fairness), the ranked table with flags and
/// every metric's definition and direction, then per strategy (in rank
/// order) Heroku's sleep chart and the server's chart.
pub fn html(e: &ExperimentResult) -> String {
    let ranked = rank::rank(e);
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>ratewise simulation: {}</title><style>{CSS}</style></head><body data-strategies=\"{}\">",
        esc(&e.scenario.name),
        e.results.len()
    );
    let _ = write!(
        out,
        "<h1>ratewise simulation: {}</h1><p>{}</p><p class=\"answer\"><strong>{}</strong></p><p class=\"rule\">Rule: {}.</p><p class=\"rule\">{}. In Figure 1, that means no dot other than a strategy handed the quota lies below and to the left of the large black one by more than that margin.</p>",
        esc(&e.scenario.name),
        esc(&e.scenario.description),
        esc(&rank::answer(e, &ranked)),
        esc(rank::RULE),
        esc(&rank::never_dominated_aim())
    );
    out.push_str("<figure id=\"decision\">");
    decision_chart(&mut out, e, &ranked);
    out.push_str("<figcaption>Each dot is one strategy. Orange rings mark the Pareto front (joined by a staircase when it holds several): no other strategy has both fewer retries and a shorter time to clear. Hollow dots are flagged (see the table). The default, <code>throttle</code>, is the large black dot.</figcaption></figure>");
    out.push_str("<figure id=\"tradeoff\">");
    tradeoff_chart(&mut out, e, &ranked);
    out.push_str("<figcaption>How hard each strategy makes a single client wait, and how evenly the successes were shared.</figcaption></figure>");
    out.push_str("<table class=\"metrics\"><thead><tr><th>#</th><th>Strategy</th>");
    for m in &rank::METRICS {
        let _ = write!(
            out,
            "<th title=\"{}: {}\">{} {}</th>",
            esc(m.name),
            esc(m.direction.words()),
            esc(m.short),
            m.direction.arrow()
        );
    }
    out.push_str("</tr></thead><tbody>");
    for rk in &ranked {
        let r = &e.results[rk.index];
        let mut class = Vec::new();
        if r.strategy == rank::DEFAULT_STRATEGY {
            class.push("default");
        }
        if !rk.flags.is_empty() {
            class.push("flagged");
        }
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{}{}</td><td>{}</td>",
            class.join(" "),
            rk.rank,
            if rk.tier == 1 && !rk.never_waits() {
                "*"
            } else {
                ""
            },
            esc(&strategy_label(&r.strategy, rk))
        );
        for m in &rank::METRICS {
            let _ = write!(
                out,
                "<td>{}</td>",
                esc(&metric_cell(r, rk, m, e.runs, e.runs > 1))
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table><p>* on the Pareto front of retry rate and time to clear. ! flagged:</p><ul class=\"flags\">");
    for rk in &ranked {
        for f in &rk.flags {
            let _ = write!(
                out,
                "<li>{}</li>",
                esc(&f.explain(&e.results[rk.index].strategy))
            );
        }
    }
    out.push_str("</ul>");
    for note in identical_notes(e) {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(&note));
    }
    out.push_str("<h2>What the numbers mean</h2><dl class=\"metrics\">");
    for m in &rank::METRICS {
        let _ = write!(
            out,
            "<dt>{} {}</dt><dd>{}: {} ({}).</dd>",
            esc(m.short),
            m.direction.arrow(),
            esc(m.name),
            esc(m.definition),
            m.direction.words()
        );
    }
    out.push_str("</dl>");
    if let Some(c) = &e.clear_scenario {
        let _ = write!(
            out,
            "<p>Time to clear comes from the companion scenario <code>{}</code>: {}</p>",
            esc(&c.name),
            esc(&c.description)
        );
    }
    let _ = write!(
        out,
        "<p>Server: {}. Seed {}, {} run{} per strategy; the metrics are means{}. The charts below show the first run, one strategy per section in rank order; they sample every {} simulated seconds.</p>",
        esc(&e.scenario.server.describe()),
        e.seed,
        e.runs,
        if e.runs == 1 { "" } else { "s" },
        if e.runs > 1 { ", with min–max over runs" } else { "" },
        fmt_tick(e.scenario.sample_interval_s)
    );
    for rk in &ranked {
        let r = &e.results[rk.index];
        let _ = write!(
            out,
            "<section class=\"strategy\" id=\"s-{0}\"><h2>{1}. {0}</h2>",
            esc(&r.strategy),
            rk.rank
        );
        sleep_chart(&mut out, &r.strategy, &r.trace);
        server_chart(
            &mut out,
            &r.strategy,
            &r.trace,
            e.scenario.sample_interval_s,
        );
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
        // Counts get whole-number ticks only.
        assert_eq!(count_axis(3.0), (1.0, 3.0));
        assert_eq!(count_axis(13.0), (5.0, 15.0));
        assert_eq!(count_axis(4500.0), (1000.0, 5000.0));
    }
}
