//! The default `ratewise simulate` run: the Heroku scenario (30-minute
//! contention run plus the time-to-clear companion) for every strategy, one
//! seed. Also prints the simulated events per run so events per second can
//! be derived from the measured time.

use criterion::{criterion_group, criterion_main, Criterion};
use ratewise_sim::{Experiment, Scenario};

fn default_run(c: &mut Criterion) {
    let scenario = match Scenario::load("heroku") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let run = || Experiment::new(scenario.clone()).seed(1).run(|| {});
    if let Ok(r) = run() {
        eprintln!("default run: {} simulated events", r.events);
    }
    c.bench_function("default_run_heroku_all_strategies", |b| {
        b.iter(|| std::hint::black_box(run()));
    });

    let all = match Scenario::built_in() {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let sweep = || {
        all.iter()
            .filter(|s| s.name != "heroku-workload")
            .map(|s| {
                Experiment::new(s.clone())
                    .seed(1)
                    .run(|| {})
                    .map_or(0, |r| r.events)
            })
            .sum::<u64>()
    };
    eprintln!("all default scenarios: {} simulated events", sweep());
    c.bench_function("all_scenarios_all_strategies", |b| {
        b.iter(|| std::hint::black_box(sweep()));
    });
}

criterion_group!(benches, default_run);
criterion_main!(benches);
