//! The HTML report renders in a real browser: its first figure is the
//! decision chart with every strategy on it, then one sleep chart per
//! strategy.
//!
//! The page's structure is checked as text; then the report is rendered by
//! headless Chromium and the DOM is checked (the page's inline script
//! counts charts that actually laid out). Without `chromium` the browser
//! test is reported ignored (see `support/chromium.rs`).

#[path = "support/chromium.rs"]
mod chromium;

use ratewise::Timestamp;
use ratewise_client::{Next, Outcome, Strategy};
use ratewise_sim::strategies::StrategyParams;
use ratewise_sim::{report, Experiment, Scenario, StrategyInfo};

/// A local test strategy (not a real throttle): sleeps 1 s after every 429.
struct Fixed;
impl Strategy for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    fn before_call(&mut self, _now: Timestamp) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    fn after_attempt(&mut self, _now: Timestamp, o: &Outcome) -> Next {
        match o.signal {
            ratewise_client::Signal::Throttled => Next::Retry(std::time::Duration::from_secs(1)),
            _ => Next::Done,
        }
    }
}

fn build(_: &StrategyParams) -> Result<Box<dyn Strategy>, String> {
    Ok(Box::new(Fixed))
}

fn report_html() -> (String, Vec<String>) {
    let scenario = Scenario::load("heroku").unwrap_or_else(|e| panic!("{e}"));
    let mut chosen: Vec<StrategyInfo> = ["eiprd", "eb", "eigd", "throttle"]
        .iter()
        .map(|n| ratewise_sim::strategies::find(n).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    chosen.push(StrategyInfo {
        name: "local-fixed",
        description: "test strategy",
        build,
        fleet: None,
    });
    let names: Vec<String> = chosen.iter().map(|s| s.name.to_owned()).collect();
    let e = Experiment::new(scenario)
        .strategies(chosen)
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"));
    (report::html(&e), names)
}

/// The markup of the first chart on the page.
fn first_chart(html: &str) -> &str {
    let start = html.find("<svg ").unwrap_or(0);
    let end = html[start..]
        .find("</svg>")
        .map_or(html.len(), |e| start + e);
    &html[start..end]
}

/// The first chart is the decision chart and has a point for every
/// strategy, the default highlighted.
fn decision_chart_first(html: &str, names: &[String]) {
    let first = first_chart(html);
    assert!(
        first.contains("class=\"chart decision-chart\""),
        "the first figure is not the decision chart: {}",
        &first[..first.len().min(200)]
    );
    for name in names {
        assert!(
            first.contains(&format!("class=\"point\" data-strategy=\"{name}\""))
                || first.contains(&format!("class=\"point default\" data-strategy=\"{name}\"")),
            "{name} is missing from the decision chart"
        );
    }
    assert_eq!(first.matches("<g class=\"point").count(), names.len());
    assert!(
        first.contains("class=\"point default\" data-strategy=\"throttle\""),
        "the default strategy is not highlighted"
    );
}

fn structural(html: &str, names: &[String]) {
    let n = names.len();
    decision_chart_first(html, names);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    // Two comparison figures, then two charts per strategy.
    assert_eq!(html.matches("<svg ").count(), 2 * n + 2);
    assert_eq!(html.matches("</svg>").count(), 2 * n + 2);
    assert_eq!(html.matches("class=\"chart sleep-chart\"").count(), n);
    assert_eq!(html.matches("<section ").count(), n);
    // Self-contained: nothing fetched from the network.
    for bad in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(bad), "external reference: {bad}");
    }
    // The server chart says its interval (heroku samples every 10 s) and
    // labels its right axis; every metric is defined with its direction.
    assert_eq!(
        html.matches("responses per 10 s interval</text>").count(),
        n
    );
    assert_eq!(
        html.matches("server capacity left (requests)</text>")
            .count(),
        n
    );
    for defined in [
        "lower is better",
        "higher is better",
        "Rule: ranked by Pareto tiers",
    ] {
        assert!(html.contains(defined), "{defined}");
    }
    // 10 client series per sleep chart.
    assert!(html.matches("<polyline").count() >= n * (10 + 3));
}

#[test]
fn report_is_self_contained_with_every_chart() {
    let (html, names) = report_html();
    structural(&html, &names);
}

#[test]
#[cfg_attr(
    ratewise_no_chromium,
    ignore = "needs chromium (apt-get install chromium)"
)]
fn report_opens_with_the_decision_chart_in_a_browser() {
    let (html, names) = report_html();
    let n = names.len();
    let dom = chromium::dump_dom_of(&html, "report");
    assert!(
        dom.contains(&format!("data-rendered-charts=\"{n}\"")),
        "rendered DOM does not report {n} laid-out charts"
    );
    assert_eq!(dom.matches("class=\"chart sleep-chart\"").count(), n);
    assert!(
        dom.contains("data-first-chart=\"chart decision-chart\""),
        "in the browser the first chart is not the decision chart"
    );
    assert!(
        dom.contains(&format!("data-decision-points=\"{n}\"")),
        "the browser did not lay out {n} points on the decision chart"
    );
    decision_chart_first(&dom, &names);
}

/// A run of `clients` Heroku-shaped clients (each with Heroku's quota per
/// client), as HTML.
fn fleet_report(clients: usize) -> String {
    let processes = clients / 5;
    let src = format!(
        "name = \"fleet\"\ndescription = \"{clients} clients\"\nsample_interval_s = 10\n\
         [server]\nkind = \"heroku_bucket\"\ncapacity = {}\nrefill_per_s = {}\nstarting = 0\n\
         [[clients]]\nprocesses = {processes}\nthreads = 5\n\
         workload = {{ duration_s = 120, interrupt_siblings = true }}\n",
        450 * clients,
        0.125 * clients as f64
    );
    let scenario = Scenario::parse(&src, "fleet.toml").unwrap_or_else(|e| panic!("{e}"));
    let eb = ratewise_sim::strategies::find("eb").unwrap_or_else(|e| panic!("{e}"));
    let result = Experiment::new(scenario)
        .strategies(vec![eb])
        .seed(1)
        .run(|| {})
        .unwrap_or_else(|e| panic!("{e}"));
    report::html(&result)
}

/// The report's size does not grow with the client count: the sleep chart
/// follows at most `MAX_SLEEP_SERIES` clients, spread evenly, and says so.
#[test]
fn the_report_of_a_fleet_is_no_bigger_than_of_a_crowd() {
    let crowd = fleet_report(200);
    let fleet = fleet_report(4_000);
    let (a, b) = (crowd.len() as f64, fleet.len() as f64);
    assert!(b < a * 1.25, "{a} bytes at 200 clients, {b} at 4,000");
    let shown = ratewise_sim::engine::MAX_SLEEP_SERIES;
    assert!(
        fleet.contains(&format!("{shown} of 4000 clients (spread evenly)")),
        "the chart says how many clients it follows"
    );
    assert_eq!(fleet.matches("class=\"series\"").count(), shown);
}
