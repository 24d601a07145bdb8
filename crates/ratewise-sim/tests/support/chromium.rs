//! Headless Chromium for tests that check a page as a browser lays it out
//! (the simulator's reports, the tower demo page).
//!
//! A test that needs the browser is marked
//! `#[cfg_attr(ratewise_no_chromium, ignore = "needs chromium (…)")]`: the
//! crate's `build.rs` sets that cfg when `chromium` is not on `PATH` (unless
//! `CI` is set), so `cargo test` reports the test ignored, with the reason,
//! never passed. A test that runs without the browser (under CI, or asked
//! with `--include-ignored`) fails. The page's structure is checked by tests
//! of its own, which need no browser.

// Each test crate that includes this file uses part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The browser on `PATH` (as the build script looks for it); panics, with
/// the install command, when there is none.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("chromium is not installed: apt-get install chromium"))
}

/// The DOM of `url` after headless Chromium ran its scripts (`extra` flags,
/// e.g. a virtual-time budget, are added).
pub fn dump_dom(url: &str, extra: &[&str]) -> String {
    let profile = std::env::temp_dir().join(format!(
        "ratewise-chromium-{}-{:x}",
        std::process::id(),
        url.len() ^ extra.len() << 8
    ));
    let out = Command::new(chromium())
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
