//! What `ratewise overload` prints: a table per scenario, the same figures
//! as JSON, and an HTML page charting each controller over time.

use std::fmt::Write;

use crate::overload::controller::Controller;
use crate::overload::run::OverloadResult;
use crate::overload::scenario::OverloadScenario;
use crate::report::esc;

/// The line under every table: what each column means (docs/simulator.md
/// has the full definitions).
pub const LEGEND: &str = "Good*: responses within the latency objective, per second and as a share of \
the capacity there was to use (min of demand and capacity). p99/p99.9: latency of admitted requests \
in seconds when the server saw more than its capacity. Refused: at admission; Refuse ms: p99 time to \
the refusal. Wasted: share of busy time spent on requests whose caller had given up. Amplif: requests \
seen / calls made. Converge: ms after each change until goodput within the objective is within 5 % of \
its steady value. Final: Good* share over the last 10 s. Success: calls answered within the timeout, \
per class. Jain: fairness of the tenants' success rates. * marks the default controller.";

/// What `ratewise overload` prints for one scenario: a line naming it
/// (description, capacity, no-load p99, objective), then [`table`].
pub fn text_report(s: &OverloadScenario, results: &[OverloadResult]) -> String {
    format!(
        "{}: {} (capacity {:.0}/s, no-load p99 {:.0} ms, objective {:.0} ms)\n{}",
        s.name,
        s.description,
        s.capacity_per_s(),
        s.no_load_p99_ms(),
        s.objective_ms(),
        table(results)
    )
}

/// A number with `decimals`, or `-` when it is not finite.
fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".to_owned()
    }
}

/// A text table of `results`, one row a controller.
pub fn table(results: &[OverloadResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:>7} {:>7} {:>8} {:>9} {:>8} {:>6} {:>7} {:>6} {:>11} {:>7} {:>15} {:>5}",
        "Controller",
        "Good*/s",
        "Good*%",
        "p99 ms",
        "p99.9 ms",
        "Refused",
        "Ref ms",
        "Wasted",
        "Amplif",
        "Converge ms",
        "Final%",
        "Success",
        "Jain"
    );
    for r in results {
        let converge = if r.convergence_ms.is_empty() {
            "-".to_owned()
        } else {
            r.convergence_ms
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        let success = r
            .success_by_priority
            .iter()
            .map(|(class, v)| format!("{}{}", &class[..1], num(100.0 * v, 1)))
            .collect::<Vec<_>>()
            .join(" ");
        let name = if r.default {
            format!("{}*", r.controller)
        } else {
            r.controller.to_owned()
        };
        let _ = writeln!(
            out,
            "{:<10} {:>7.0} {:>6.1}% {:>8} {:>9} {:>7.1}% {:>6} {:>6.1}% {:>6.2} {:>11} {:>6.1}% {:>15} {:>5.2}",
            name,
            r.goodput_within_objective_per_s,
            100.0 * r.goodput_within_objective_share,
            num(r.p99_overloaded_ms, 1),
            num(r.p999_overloaded_ms, 1),
            100.0 * r.refused_share,
            r.refusal_p99_ms.map_or("-".to_owned(), |v| num(v, 1)),
            100.0 * r.wasted_work_share,
            r.retry_amplification,
            converge,
            100.0 * r.final_share,
            success,
            r.jain_fairness,
        );
    }
    out
}

/// One JSON object for a scenario: its parameters, the default
/// controller's name, and one object per controller with every figure of
/// the table (and the older ones) under the names [`OverloadResult`]
/// documents.
pub fn json(s: &OverloadScenario, results: &[OverloadResult]) -> serde_json::Value {
    serde_json::json!({
        "scenario": s.name,
        "description": s.description,
        "capacity_per_s": s.capacity_per_s(),
        "no_load_p99_ms": s.no_load_p99_ms(),
        "objective_ms": s.objective_ms(),
        "default_controller": Controller::DEFAULT.name(),
        "controllers": results,
    })
}

/// One controller's timeline as an inline SVG: the limit and the requests
/// in flight on the left axis, the p99 latency of each second's arrivals on
/// the right axis (dashed), and the scenario's changes as vertical lines.
fn timeline_svg(s: &OverloadScenario, r: &OverloadResult) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 220.0, 56.0, 64.0, 24.0, 36.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let t_max = s.duration_ms as f64 / 1000.0;
    let count_max = r
        .timeline
        .iter()
        .flat_map(|p| [p.1, p.2])
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        .ceil();
    // The bound recovery is judged against, a step at each change.
    let mut bound = vec![(0.0, s.recovery_bound_ms(0))];
    for c in &s.changes {
        let at = c.at_ms();
        bound.push((at as f64 / 1000.0, bound[bound.len() - 1].1));
        bound.push((at as f64 / 1000.0, s.recovery_bound_ms(at)));
    }
    bound.push((t_max, bound[bound.len() - 1].1));
    let lat_max = r
        .timeline
        .iter()
        .map(|p| p.3)
        .chain(bound.iter().map(|b| b.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .ceil();
    let x = |t: f64| left + pw * t / t_max;
    let y_count = |v: f64| top + ph * (1.0 - v / count_max);
    let y_lat = |v: f64| top + ph * (1.0 - v / lat_max);
    let line = |pts: Vec<(f64, f64)>| {
        pts.iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="overload-chart" data-controller="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{}: limit, in flight and p99 latency over time">"#,
        r.controller,
        esc(r.controller)
    );
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
    );
    for c in &s.changes {
        let at = c.at_ms() as f64 / 1000.0;
        let _ = write!(
            svg,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{top}" y2="{1:.1}" stroke="#d55" stroke-dasharray="2 3"/>"##,
            x(at),
            top + ph
        );
    }
    let pts = bound.iter().map(|&(t, b)| (x(t), y_lat(b))).collect();
    let _ = write!(
        svg,
        r##"<polyline class="bound" points="{}" fill="none" stroke="#e9a" stroke-width="1"/>"##,
        line(pts)
    );
    if r.timeline.iter().any(|p| p.1.is_finite()) {
        let pts = r.timeline.iter().map(|p| (x(p.0), y_count(p.1))).collect();
        let _ = write!(
            svg,
            r##"<polyline class="series limit" points="{}" fill="none" stroke="#1f4e9c" stroke-width="2"/>"##,
            line(pts)
        );
    }
    let pts = r.timeline.iter().map(|p| (x(p.0), y_count(p.2))).collect();
    let _ = write!(
        svg,
        r##"<polyline class="series inflight" points="{}" fill="none" stroke="#2a9d5c" stroke-width="1.5"/>"##,
        line(pts)
    );
    // Goodput within the objective, each second's share of the capacity
    // there was to use, on the left axis's scale with 100 % at its top.
    let pts: Vec<(f64, f64)> = r
        .goodput_timeline
        .iter()
        .enumerate()
        .filter(|(_, g)| g.is_finite())
        .map(|(i, g)| {
            (
                x(i as f64 + 1.0),
                top + ph * (1.0 - g.clamp(0.0, 1.2) / 1.2),
            )
        })
        .collect();
    if pts.len() > 1 {
        let _ = write!(
            svg,
            r##"<polyline class="series goodput" points="{}" fill="none" stroke="#7b3fa0" stroke-width="1.5"/>"##,
            line(pts)
        );
    }
    // A second none of whose arrivals was answered by the end of the run
    // has no latency to draw (its requests are still queued): the line
    // breaks there instead of falling to zero.
    let mut segment: Vec<(f64, f64)> = Vec::new();
    let mut segments = Vec::new();
    for p in &r.timeline {
        if p.3.is_nan() {
            segments.push(std::mem::take(&mut segment));
        } else {
            segment.push((x(p.0), y_lat(p.3)));
        }
    }
    segments.push(segment);
    for seg in segments.into_iter().filter(|s| s.len() > 1) {
        let _ = write!(
            svg,
            r##"<polyline class="series latency" points="{}" fill="none" stroke="#b5651d" stroke-width="1.5" stroke-dasharray="5 3"/>"##,
            line(seg)
        );
    }
    // Axes: whole-number ticks, both axes labelled with their unit.
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{0:.1}" y="{1:.1}" font-size="10" text-anchor="end">{2:.0}</text><text x="{3:.1}" y="{1:.1}" font-size="10">{4:.0}</text><text x="{5:.1}" y="{6:.1}" font-size="10" text-anchor="middle">{7:.0}</text>"##,
            left - 4.0,
            top + ph * (1.0 - f) + 3.0,
            count_max * f,
            left + pw + 4.0,
            lat_max * f,
            x(t_max * f),
            top + ph + 14.0,
            t_max * f
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{0:.1}" y="{1:.1}" font-size="11" text-anchor="middle">time (s)</text><text x="12" y="{2:.1}" font-size="11" transform="rotate(-90 12 {2:.1})" text-anchor="middle">requests (limit, in flight)</text><text x="{3:.1}" y="{2:.1}" font-size="11" transform="rotate(90 {3:.1} {2:.1})" text-anchor="middle">p99 latency (ms)</text><text x="{left}" y="14" font-size="12" font-weight="bold">{4}</text></svg>"##,
        left + pw / 2.0,
        h - 4.0,
        top + ph / 2.0,
        w - 10.0,
        esc(r.controller)
    );
    svg
}

/// A self-contained HTML page: for each scenario, the table and one chart
/// per controller of its limit, in-flight count and p99 latency over time.
pub fn html(runs: &[(OverloadScenario, Vec<OverloadResult>)]) -> String {
    let mut out = String::from(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>ratewise overload report</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}pre{background:#f6f6f6;padding:1em;overflow:auto}
.charts{display:flex;flex-wrap:wrap;gap:12px}.legend span{margin-right:1.5em}</style></head><body>
<h1>Admission control under overload</h1>
<p class="legend"><span style="color:#1f4e9c">━ limit</span><span style="color:#2a9d5c">━ in flight</span><span style="color:#7b3fa0">━ goodput within the objective, share of the usable capacity (plot height = 120 %)</span><span style="color:#b5651d">╍ p99 latency of each second's arrivals (right axis)</span><span style="color:#e9a">━ 2 × no-load p99 of the server in force</span><span style="color:#d55">┆ capacity or latency change</span></p>
"#,
    );
    for (s, results) in runs {
        let _ = write!(
            out,
            "<h2>{}</h2><p>{}; capacity {:.0}/s, no-load p99 {:.0} ms, objective {:.0} ms.</p><pre>{}</pre><p class=\"legend\">{}</p><div class=\"charts\">",
            esc(&s.name),
            esc(&s.description),
            s.capacity_per_s(),
            s.no_load_p99_ms(),
            s.objective_ms(),
            esc(&table(results)),
            esc(LEGEND)
        );
        for r in results {
            out.push_str(&timeline_svg(s, r));
        }
        out.push_str("</div>");
    }
    out.push_str(
        r#"<script>
// For tests and readers: how many series the browser actually laid out.
const drawn = [...document.querySelectorAll('polyline.series')]
  .filter(p => { const b = p.getBBox(); return b.width > 0; }).length;
document.body.setAttribute('data-rendered-series', String(drawn));
document.body.setAttribute('data-charts', String(document.querySelectorAll('svg.overload-chart').length));
</script></body></html>"#,
    );
    out
}
