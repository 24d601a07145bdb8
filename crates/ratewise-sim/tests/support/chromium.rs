//! Headless Chromium for tests that check a page as a browser lays it out
//! (the simulator's reports, the tower demo page).
//!
//! Without `/usr/bin/chromium` the page is checked structurally only —
//! unless `CI` is set, where a missing browser fails the test.

// Each test crate that includes this file uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether a browser check can run here; `false` (after saying so) outside
/// CI when Chromium is missing; panics under CI.
pub fn available() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but {CHROMIUM} is missing: install the `chromium` package"
    );
    println!("note: {CHROMIUM} not found; the page was checked structurally only");
    false
}

/// The DOM of `url` after headless Chromium ran its scripts (`extra` flags,
/// e.g. a virtual-time budget, are added). Call [`available`] first.
pub fn dump_dom(url: &str, extra: &[&str]) -> String {
    let profile = std::env::temp_dir().join(format!(
        "ratewise-chromium-{}-{:x}",
        std::process::id(),
        url.len() ^ extra.len() << 8
    ));
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("running chromium: {e}"));
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`dump_dom`] of `html` written to a temporary file.
pub fn dump_dom_of(html: &str, name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("ratewise-page-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join(format!("{name}.html"));
    std::fs::write(&file, html).unwrap_or_else(|e| panic!("{e}"));
    let dom = dump_dom(&format!("file://{}", file.display()), &[]);
    let _ = std::fs::remove_dir_all(&dir);
    dom
}
