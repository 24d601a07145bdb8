//! Prints the server-side comparison for every shipped overload scenario.
//!
//! `cargo run --release -p ratewise-sim --example overload_table`
use ratewise_sim::overload::{run, table, Controller, OverloadScenario};

fn main() {
    for s in OverloadScenario::all() {
        println!(
            "{} — {} (capacity {:.0}/s)",
            s.name,
            s.description,
            s.capacity_per_s()
        );
        let results: Vec<_> = Controller::ALL.iter().map(|&c| run(&s, c, 1)).collect();
        println!("{}", table(&results));
    }
}
