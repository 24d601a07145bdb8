//! The decision engine's semantics: evidence in every status, all
//! descriptors decided together, hits, overrides, parents, bad input.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use ratewise_server::config::{compile_sources, ConfigError, LoadOptions};
use ratewise_server::rls::{Code, RateLimitDescriptor, RateLimitOverride, Unit};
use ratewise_server::{Engine, EngineOptions, HeaderMode, RequestError};

const USERS: &str = "domain: d
descriptors:
  - key: user
    rate_limit: { unit: second, requests_per_unit: 3, name: per_user }
  - key: route
    rate_limit: { unit: second, requests_per_unit: 100, name: per_route }
";

#[test]
fn statuses_carry_limit_remaining_and_exact_reset() {
    let e = engine(USERS);
    let r = req("d", vec![desc(&[("user", "a")])]);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let answer = decide(&e, &r, at(0));
        remaining.push(answer.statuses[0].limit_remaining);
        let limit = answer.statuses[0].current_limit.clone().expect("a limit");
        assert_eq!(
            (limit.requests_per_unit, limit.unit(), limit.name.as_str()),
            (3, Unit::Second, "per_user")
        );
    }
    assert_eq!(remaining, vec![2, 1, 0]);
    let refused = decide(&e, &r, at(100_000_000));
    assert_eq!(code(&refused), Code::OverLimit);
    // GCRA: back to full three intervals (3 × 333 333 334 ns) after the
    // three, to the nanosecond.
    let reset = refused.statuses[0].duration_until_reset.expect("a reset");
    assert_eq!((reset.seconds, reset.nanos), (0, 900_000_002));
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    assert_eq!(
        header(&refused, "ratelimit-policy"),
        Some("\"per_user\";q=3;w=1")
    );
    assert_eq!(header(&refused, "ratelimit"), Some("\"per_user\";r=0;t=1"));
    // One unit back after a third of a second.
    assert_eq!(code(&decide(&e, &r, at(333_333_334))), Code::Ok);
}

#[test]
fn a_request_refused_by_one_descriptor_charges_none() {
    let e = engine(USERS);
    let route = desc(&[("route", "/a")]);
    let user = desc(&[("user", "u")]);
    let both = req("d", vec![route.clone(), user.clone()]);
    assert_eq!(admitted(&e, &both, 10, at(0)), 3);
    // The seven refused requests did not charge the route.
    let route_only = req("d", vec![route]);
    let answer = decide(&e, &route_only, at(0));
    assert_eq!(
        answer.statuses[0].limit_remaining, 96,
        "100 - 3 admitted - this one"
    );
    // Statuses are index-aligned: the refusing one is the second.
    let refused = decide(&e, &both, at(0));
    assert_eq!(codes(&refused), vec![Code::Ok, Code::OverLimit]);
}

#[test]
fn hits_addend_charges_units_and_zero_looks_without_charging() {
    let e = engine(USERS);
    let mut r = req("d", vec![desc(&[("user", "a")])]);
    r.hits_addend = 2;
    assert_eq!(decide(&e, &r, at(0)).statuses[0].limit_remaining, 1);
    assert_eq!(
        code(&decide(&e, &r, at(0))),
        Code::OverLimit,
        "2 more do not fit in 1"
    );
    // Per-descriptor hits override the request's; 0 looks.
    let look = req("d", vec![desc_hits(&[("user", "a")], 0)]);
    for _ in 0..5 {
        let answer = decide(&e, &look, at(0));
        assert_eq!(code(&answer), Code::Ok);
        assert_eq!(answer.statuses[0].limit_remaining, 1);
    }
    let one = req("d", vec![desc_hits(&[("user", "a")], 1)]);
    assert_eq!(code(&decide(&e, &one, at(0))), Code::Ok);
    assert_eq!(
        code(&decide(&e, &look, at(0))),
        Code::OverLimit,
        "nothing left to look at"
    );
}

#[test]
fn a_huge_hits_addend_is_over_the_limit_and_charges_nothing() {
    let e = engine(USERS);
    let huge = req("d", vec![desc_hits(&[("user", "a")], u64::MAX)]);
    let answer = decide(&e, &huge, at(0));
    assert_eq!(code(&answer), Code::OverLimit);
    assert_eq!(header(&answer, "retry-after"), None, "waiting never helps");
    let one = req("d", vec![desc(&[("user", "a")])]);
    assert_eq!(decide(&e, &one, at(0)).statuses[0].limit_remaining, 2);
}

#[test]
fn a_limit_override_replaces_the_configured_limit_per_descriptor() {
    let e = engine(USERS);
    let overridden = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: Unit::Minute as i32,
        }),
        ..desc(&[("user", "a")])
    };
    let r = req("d", vec![overridden]);
    assert_eq!(admitted(&e, &r, 8, at(0)), 5);
    let limit = decide(&e, &r, at(0)).statuses[0]
        .current_limit
        .clone()
        .expect("a limit");
    assert_eq!((limit.requests_per_unit, limit.unit()), (5, Unit::Minute));
    // The configured per-user counter was not touched.
    assert_eq!(
        admitted(&e, &req("d", vec![desc(&[("user", "a")])]), 5, at(0)),
        3
    );
    // An override without a unit is refused with a message.
    let bad = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: 0,
        }),
        ..desc(&[("user", "a")])
    };
    let err = e.decide_at(&req("d", vec![bad]), at(0)).unwrap_err();
    assert_eq!(err, RequestError::BadOverride { index: 0, unit: 0 });
}

#[test]
fn charge_parents_charges_every_level_all_or_nothing() {
    let e = engine(
        "domain: d
descriptors:
  - key: client
    rate_limit: { unit: second, requests_per_unit: 5, name: client }
    descriptors:
      - key: route
        charge_parents: true
        rate_limit: { unit: second, requests_per_unit: 2, name: route }
",
    );
    let route = |r: &str| req("d", vec![desc(&[("client", "c"), ("route", r)])]);
    assert_eq!(admitted(&e, &route("/a"), 4, at(0)), 2);
    assert_eq!(admitted(&e, &route("/b"), 4, at(0)), 2);
    // The client's own limit has 5 - 4 = 1 left, and the refused route
    // requests did not charge it.
    let client = req("d", vec![desc(&[("client", "c")])]);
    assert_eq!(admitted(&e, &client, 3, at(0)), 1);
    // With the client spent, a fresh route is refused by its parent.
    let refused = decide(&e, &route("/c"), at(0));
    assert_eq!(code(&refused), Code::OverLimit);
    assert_eq!(
        refused.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("client"),
        "the status names the level that refused"
    );
    // ...and /c's own counter was not charged.
    assert_eq!(admitted(&e, &route("/c"), 3, at(1_000_000_000)), 2);
}

#[test]
fn every_algorithm_decides_and_reports() {
    for algorithm in [
        "gcra",
        "token_bucket",
        "leaky_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
    ] {
        let e = engine(&format!(
            "domain: d
descriptors:
  - key: k
    rate_limit: {{ unit: minute, requests_per_unit: 10, algorithm: {algorithm} }}
"
        ));
        let r = req("d", vec![desc(&[("k", "v")])]);
        assert_eq!(admitted(&e, &r, 15, at(1)), 10, "{algorithm}");
        let refused = decide(&e, &r, at(1));
        assert!(header(&refused, "retry-after").is_some(), "{algorithm}");
    }
}

#[test]
fn periods_and_bursts_extend_the_format() {
    let e = engine(
        "domain: d
descriptors:
  - key: k
    rate_limit: { requests_per_unit: 100, period: 5m, burst: 20, name: five_minutes }
",
    );
    let r = req("d", vec![desc(&[("k", "v")])]);
    assert_eq!(admitted(&e, &r, 30, at(0)), 20, "the burst");
    // One more every 3 s.
    assert_eq!(admitted(&e, &r, 5, at(3_000_000_000)), 1);
    let status = decide(&e, &r, at(3_000_000_000)).statuses[0].clone();
    let limit = status.current_limit.expect("a limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit()),
        (20, Unit::Minute),
        "the nearest unit"
    );
}

#[test]
fn unknown_domains_and_unmatched_descriptors_answer_ok_without_a_limit() {
    let e = engine(USERS);
    let r = decide(&e, &req("nowhere", vec![desc(&[("user", "a")])]), at(0));
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(r.statuses.len(), 1);
    assert!(r.statuses[0].current_limit.is_none());
    let r = decide(
        &e,
        &req("d", vec![desc(&[("other", "x")]), desc(&[])]),
        at(0),
    );
    assert_eq!(codes(&r), vec![Code::Ok, Code::Ok]);
    assert!(r.dynamic_metadata.is_none());
}

#[test]
fn bad_requests_are_refused_with_a_message_and_charge_nothing() {
    let e = engine(USERS);
    let ok = desc(&[("user", "a")]);
    assert_eq!(
        e.decide_at(&req("", vec![ok.clone()]), at(0)).unwrap_err(),
        RequestError::EmptyDomain
    );
    assert_eq!(
        e.decide_at(&req("d", vec![]), at(0)).unwrap_err(),
        RequestError::NoDescriptors
    );
    let many = req("d", vec![ok.clone(); 10_000]);
    let err = e.decide_at(&many, at(0)).unwrap_err();
    assert_eq!(
        err,
        RequestError::TooManyDescriptors {
            count: 10_000,
            max: 64
        }
    );
    assert!(err.to_string().contains("at most 64"));
    let deep: Vec<(&str, &str)> = vec![("user", "a"); 100];
    let err = e
        .decide_at(&req("d", vec![desc(&deep)]), at(0))
        .unwrap_err();
    assert!(matches!(
        err,
        RequestError::TooManyEntries {
            index: 0,
            count: 100,
            ..
        }
    ));
    // Nothing was charged by any of them.
    assert_eq!(
        decide(&e, &req("d", vec![ok]), at(0)).statuses[0].limit_remaining,
        2
    );
}

#[test]
fn header_modes() {
    let r = req("d", vec![desc(&[("user", "a")]), desc(&[("route", "/x")])]);
    let with = |headers| {
        let e = engine_with(
            USERS,
            EngineOptions {
                headers,
                ..Default::default()
            },
        );
        for _ in 0..3 {
            decide(&e, &r, at(0));
        }
        decide(&e, &r, at(0))
    };
    let ietf = with(HeaderMode::Ietf);
    assert_eq!(
        header(&ietf, "ratelimit-policy"),
        Some("\"per_user\";q=3;w=1, \"per_route\";q=100;w=1")
    );
    assert_eq!(
        header(&ietf, "ratelimit"),
        Some("\"per_user\";r=0;t=1, \"per_route\";r=97;t=1")
    );
    let legacy = with(HeaderMode::Legacy);
    assert_eq!(header(&legacy, "ratelimit-limit"), Some("3"));
    assert_eq!(header(&legacy, "ratelimit-remaining"), Some("0"));
    assert_eq!(header(&legacy, "retry-after"), Some("1"));
    let off = with(HeaderMode::Off);
    assert!(off.response_headers_to_add.is_empty());
}

#[test]
fn dynamic_metadata_names_the_matched_and_refusing_rules() {
    let e = engine_with(
        USERS,
        EngineOptions {
            dynamic_metadata: true,
            ..Default::default()
        },
    );
    let r = req("d", vec![desc(&[("user", "a")]), desc(&[("route", "/x")])]);
    for _ in 0..3 {
        decide(&e, &r, at(0));
    }
    let answer = decide(&e, &r, at(0));
    let meta = answer.dynamic_metadata.expect("metadata");
    let names = |field: &str| -> Vec<String> {
        use prost_types::value::Kind;
        match meta.fields.get(field).and_then(|v| v.kind.clone()) {
            Some(Kind::ListValue(l)) => l
                .values
                .into_iter()
                .filter_map(|v| match v.kind {
                    Some(Kind::StringValue(s)) => Some(s),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    assert_eq!(names("matched_rules"), vec!["per_user", "per_route"]);
    assert_eq!(names("over_limit_rules"), vec!["per_user"]);
}

#[test]
fn a_clock_that_jumps_back_never_admits_more() {
    let e = engine(USERS);
    let r = req("d", vec![desc(&[("user", "a")])]);
    assert_eq!(admitted(&e, &r, 3, secs(100)), 3);
    assert_eq!(admitted(&e, &r, 3, secs(50)), 0);
    assert_eq!(admitted(&e, &r, 3, secs(100)), 0);
}

#[test]
fn config_errors_name_the_file_the_line_and_the_key() {
    let load = |yaml: &str| {
        compile_sources(
            &[("limits/edge.yaml".into(), yaml.into())],
            None,
            LoadOptions::default(),
        )
        .map(|_| ())
        .unwrap_err()
    };
    let unknown = load("domain: d\ndescriptors:\n  - key: k\n    rate_limt: { unit: second, requests_per_unit: 1 }\n");
    let text = unknown.to_string();
    assert!(text.starts_with("limits/edge.yaml: "), "{text}");
    assert!(
        text.contains("rate_limt") && text.contains("line 4"),
        "{text}"
    );
    let bad_unit = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n");
    let text = bad_unit.to_string();
    assert!(
        text.contains("fortnight") && text.contains("line "),
        "{text}"
    );
    let both = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, period: 5m, requests_per_unit: 1 }\n");
    assert!(
        both.to_string().contains("either `unit` or `period`"),
        "{both}"
    );
    let dup = load("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n");
    let text = dup.to_string();
    assert!(
        text.contains("descriptors[1]") && text.contains("appears twice"),
        "{text}"
    );
    let domain_twice = compile_sources(
        &[
            ("a.yaml".into(), "domain: d\n".into()),
            ("b.yaml".into(), "domain: d\n".into()),
        ],
        None,
        LoadOptions::default(),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(domain_twice, ConfigError::DuplicateDomain { .. }));
    let period = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: { period: 5 minutes, requests_per_unit: 1 }\n");
    assert!(period.to_string().contains("invalid period"), "{period}");
    // envoyproxy/ratelimit's test/config/replaces_self.yaml and
    // replaces_empty.yaml: both refused there too.
    let replaces = |entry: &str| {
        load(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:{entry}\n      unit: second\n      requests_per_unit: 5\n"
        ))
        .to_string()
    };
    let own = replaces(" self");
    assert!(own.contains("itself") && own.contains("line 3"), "{own}");
    let empty = replaces("");
    assert!(
        empty.contains("empty `name`") && empty.contains("line 3"),
        "{empty}"
    );
}

#[test]
fn a_reload_keeps_the_state_of_unchanged_rules_and_resets_changed_ones() {
    let first = compile_sources(
        &[("c.yaml".into(), USERS.into())],
        None,
        LoadOptions::default(),
    )
    .unwrap();
    let e = Engine::new(first, EngineOptions::default());
    let user = req("d", vec![desc(&[("user", "a")])]);
    let route = req("d", vec![desc(&[("route", "/x")])]);
    assert_eq!(admitted(&e, &user, 3, at(0)), 3);
    assert_eq!(admitted(&e, &route, 10, at(0)), 10);
    let changed = USERS.replace("requests_per_unit: 100", "requests_per_unit: 50");
    let old = e.rules();
    let second = compile_sources(
        &[("c.yaml".into(), changed)],
        Some(&old),
        LoadOptions::default(),
    )
    .unwrap();
    e.swap_rules(second);
    assert_eq!(
        admitted(&e, &user, 3, at(0)),
        0,
        "per_user kept its spent counter"
    );
    assert_eq!(
        admitted(&e, &route, 60, at(0)),
        50,
        "per_route changed, so it starts afresh"
    );
}

#[test]
fn concurrent_calls_never_admit_more_than_the_limit() {
    let e = std::sync::Arc::new(engine(
        "domain: d
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 1000 }
  - key: g
    rate_limit: { unit: hour, requests_per_unit: 700 }
",
    ));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let e = std::sync::Arc::clone(&e);
            std::thread::spawn(move || {
                // Two descriptors per call, decided together.
                let r = req("d", vec![desc(&[("k", "v")]), desc(&[("g", "v")])]);
                admitted(&e, &r, 500, at(7))
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 700, "the tighter limit, exactly");
    // Every refused call left the looser counter alone.
    let k = req("d", vec![desc(&[("k", "v")])]);
    assert_eq!(admitted(&e, &k, 400, at(7)), 300);
}

proptest! {
    /// Whatever the sequence of calls, no counter admits more than its
    /// burst plus what refilled, and a refused multi-descriptor call
    /// changes nothing.
    #[test]
    fn never_over_admits(steps in prop::collection::vec((0u8..4, 0u64..3, 0u64..400_000_000), 1..120)) {
        let e = engine(
            "domain: d
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 4 }
  - key: b
    rate_limit: { unit: second, requests_per_unit: 2 }
",
        );
        let mut now = 0u64;
        let (mut a_units, mut b_units) = (0u64, 0u64);
        for (which, hits, advance) in steps {
            now += advance;
            let hits = hits.max(1);
            let descriptors = match which {
                0 => vec![desc_hits(&[("a", "x")], hits)],
                1 => vec![desc_hits(&[("b", "x")], hits)],
                _ => vec![desc_hits(&[("a", "x")], hits), desc_hits(&[("b", "x")], hits)],
            };
            let uses_a = which != 1;
            let uses_b = which != 0;
            if code(&decide(&e, &req("d", descriptors), at(now))) == Code::Ok {
                a_units += if uses_a { hits } else { 0 };
                b_units += if uses_b { hits } else { 0 };
            }
            let elapsed = Duration::from_nanos(now).as_secs_f64();
            prop_assert!(a_units as f64 <= 4.0 + 4.0 * elapsed + 1e-9);
            prop_assert!(b_units as f64 <= 2.0 + 2.0 * elapsed + 1e-9);
        }
    }
}
