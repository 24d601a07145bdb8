//! Interleaved A/B trials timed by on-CPU time, shared by the `*_ab`
//! benchmarks: on a busy machine, criterion's wall-clock numbers move with
//! the neighbours' load, while a thread's scheduler-accounted CPU time
//! leaves out the time it spent preempted.

use std::hint::black_box;
use std::time::Instant;

/// This thread's on-CPU nanoseconds, if the system reports them (Linux).
pub fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
}

/// Runs `check(thread, i)` `iters` times on each of `threads` threads and
/// returns (wall rate, cpu rate) in checks per second over all threads.
pub fn run<F: Fn(u64, u64) -> bool + Sync>(threads: u64, iters: u64, check: &F) -> (f64, f64) {
    let start = Instant::now();
    let cpu: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let c0 = cpu_ns();
                    let w0 = Instant::now();
                    let mut admitted = 0u64;
                    for i in 0..iters {
                        admitted += u64::from(check(t, i));
                    }
                    black_box(admitted);
                    let wall_ns = w0.elapsed().as_nanos() as u64;
                    // Without scheduler accounting, fall back to wall time.
                    match (c0, cpu_ns()) {
                        (Some(a), Some(b)) if b > a => b - a,
                        _ => wall_ns.max(1),
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu_rate: f64 = cpu.iter().map(|&c| iters as f64 / (c as f64 / 1e9)).sum();
    ((threads * iters) as f64 / wall, cpu_rate)
}

/// Median, lowest and highest of `v`.
pub fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The number of trials: the first numeric argument (`cargo bench` passes
/// `--bench` first), or `default`.
pub fn trials(default: usize) -> usize {
    std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
        .max(1)
}
