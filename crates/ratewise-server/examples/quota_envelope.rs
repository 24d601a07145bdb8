//! The quota service's accuracy envelope: over-admission and utilization as
//! functions of the report interval, the number of data planes and how often
//! their demand shifts, from the simulated fleet in
//! `ratewise_server::quota::envelope` (3 seeds each, 60 s simulated).
//!
//! ```text
//! cargo run --release -p ratewise-server --example quota_envelope -- [--svg docs/quota-envelope.svg]
//! cargo run --release -p ratewise-server --example quota_envelope -- --real-run   # the real-Envoy test's setup
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use ratewise_server::quota::envelope::{run, Outcome, Params};

const INTERVALS_MS: [u64; 5] = [100, 250, 500, 1000, 5000];
const INSTANCES: [usize; 4] = [2, 4, 8, 16];
const SHIFTS_S: [u64; 3] = [1, 3, 10];
const SEEDS: u64 = 3;

fn mean(p: &Params) -> (f64, f64, f64) {
    let outs: Vec<Outcome> = (1..=SEEDS)
        .map(|seed| run(&Params { seed, ..p.clone() }))
        .collect();
    let n = outs.len() as f64;
    (
        outs.iter().map(|o| o.over_admission).sum::<f64>() / n,
        outs.iter().map(|o| o.worst_second_over).fold(0.0, f64::max),
        outs.iter().map(|o| o.utilization).sum::<f64>() / n,
    )
}

fn main() {
    if std::env::args().any(|a| a == "--real-run") {
        // The setup of the test `two_envoys_with_the_quota_filter_share_one_bucket`:
        // 10/s, burst 10, two Envoys at 40 calls/s each, 5 s reports, 12 s.
        for seed in 1..=SEEDS {
            let o = run(&Params {
                rate_per_s: 10.0,
                burst: 10,
                instances: 2,
                report_interval: Duration::from_secs(5),
                shift_every: Duration::from_secs(3600),
                demand: 8.0,
                duration: Duration::from_secs(12),
                seed,
                ..Params::default()
            });
            println!("seed {seed}: {} admitted of {} allowed (utilization {:.1} %, over-admission {:.2} %)", o.admitted, o.allowed, o.utilization * 100.0, o.over_admission * 100.0);
        }
        return;
    }
    let svg_path = std::env::args().skip_while(|a| a != "--svg").nth(1);
    println!("over-admission % (mean of {SEEDS} seeds) / worst 1-s window over rate+burst % / utilization %");
    println!("quota 1000/s, burst 1000, fleet demand 2× the quota, 60 s simulated\n");
    let mut grid: Vec<(u64, usize, u64, f64, f64, f64)> = Vec::new();
    for shift in SHIFTS_S {
        println!("demand shifts every {shift} s");
        print!("{:>10}", "report");
        for n in INSTANCES {
            print!("{:>24}", format!("{n} instances"));
        }
        println!();
        for ms in INTERVALS_MS {
            print!("{:>8}ms", ms);
            for n in INSTANCES {
                let p = Params {
                    instances: n,
                    report_interval: Duration::from_millis(ms),
                    shift_every: Duration::from_secs(shift),
                    ..Params::default()
                };
                let (over, worst, util) = mean(&p);
                grid.push((shift, n, ms, over, worst, util));
                print!(
                    "{:>24}",
                    format!(
                        "{:.2} / {:.1} / {:.1}",
                        over * 100.0,
                        worst * 100.0,
                        util * 100.0
                    )
                );
            }
            println!();
        }
        println!();
    }
    if let Some(path) = svg_path {
        std::fs::write(&path, chart(&grid)).expect("the chart is written");
        println!("chart: {path}");
    }
}

/// Utilization against the report interval (log scale), one line per
/// instance count, demand shifting every 3 s; over-admission printed on
/// each point.
fn chart(grid: &[(u64, usize, u64, f64, f64, f64)]) -> String {
    let (w, h, left, top, right, bottom) = (720.0, 400.0, 70.0, 40.0, 150.0, 60.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let x = |ms: u64| {
        let (lo, hi) = ((100f64).ln(), (5000f64).ln());
        left + ((ms as f64).ln() - lo) / (hi - lo) * pw
    };
    // Utilization from 50 % to 100 %.
    let y = |u: f64| top + (1.0 - (u.clamp(0.5, 1.0) - 0.5) / 0.5) * ph;
    let worst_over = grid.iter().map(|g| g.3).fold(0.0, f64::max);
    let colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{left}" y="22" font-size="14">Quota service: share of the quota used, by report interval</text>
<text x="{left}" y="{note_y}" font-size="12">over-admission at every point of the sweep: at most {over:.2} % (parts never sum above the quota)</text>"#,
        note_y = top + ph - 8.0,
        over = worst_over * 100.0
    );
    for u in [0.5, 0.625, 0.75, 0.875, 1.0] {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy}" y2="{yy}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{:.1} %</text>"##,
            left + pw,
            left - 6.0,
            y(u) + 4.0,
            u * 100.0,
            yy = y(u)
        );
    }
    for ms in INTERVALS_MS {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x(ms),
            top + ph + 18.0,
            if ms >= 1000 {
                format!("{} s", ms / 1000)
            } else {
                format!("{ms} ms")
            }
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">report interval (demand 2× the quota, shifting every 3 s)</text>"#,
        left + pw / 2.0,
        h - 16.0
    );
    for (k, n) in INSTANCES.iter().enumerate() {
        let points: Vec<(u64, f64, f64)> = grid
            .iter()
            .filter(|g| g.0 == 3 && g.1 == *n)
            .map(|g| (g.2, g.5, g.3))
            .collect();
        let path: Vec<String> = points
            .iter()
            .map(|(ms, u, _)| format!("{:.1},{:.1}", x(*ms), y(u.min(1.0))))
            .collect();
        let color = colors[k % colors.len()];
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (ms, u, _) in &points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(*ms),
                y(u.min(1.0)),
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" fill="{color}">{n} instances</text>"#,
            left + pw + 12.0,
            top + 20.0 + 18.0 * k as f64
        );
    }
    s.push_str("</svg>\n");
    s
}
