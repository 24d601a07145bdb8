//! envoyproxy/ratelimit's documented configurations load unchanged and decide
//! as its documentation says. Where ratewise differs on purpose (GCRA, not
//! fixed windows, by default), a test shows the difference.

mod common;

use common::*;
use ratewise_server::rls::{Code, Unit};

#[test]
fn example_1_two_values_of_one_key_each_get_their_limit() {
    let e = engine(
        "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
",
    );
    let users = req("mongo_cps", vec![desc(&[("database", "users")])]);
    let default = req("mongo_cps", vec![desc(&[("database", "default")])]);
    assert_eq!(admitted(&e, &users, 600, secs(1)), 500);
    assert_eq!(admitted(&e, &default, 600, secs(1)), 500);
    // A value the configuration does not name is not limited.
    let other = req("mongo_cps", vec![desc(&[("database", "other")])]);
    let r = decide(&e, &other, secs(1));
    assert_eq!(code(&r), Code::Ok);
    assert!(r.statuses[0].current_limit.is_none());
}

const EXAMPLE_2: &str = "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

#[test]
fn example_2_nested_descriptors_limit_each_value_and_requests_combine_descriptors() {
    let e = engine(EXAMPLE_2);
    let marketing = |n: &str| desc(&[("message_type", "marketing"), ("to_number", n)]);
    let r = req("messaging", vec![marketing("2061111111")]);
    assert_eq!(admitted(&e, &r, 7, secs(1)), 5);
    // Each number gets its own 5.
    let r2 = req("messaging", vec![marketing("2062222222")]);
    assert_eq!(admitted(&e, &r2, 7, secs(1)), 5);
    // Both descriptors in one request: an OR of the decisions, and the
    // statuses line up with the descriptors.
    let both = req(
        "messaging",
        vec![
            marketing("2063333333"),
            desc(&[("to_number", "2063333333")]),
        ],
    );
    let answer = decide(&e, &both, secs(1));
    assert_eq!(codes(&answer), vec![Code::Ok, Code::Ok]);
    let limits: Vec<_> = answer
        .statuses
        .iter()
        .map(|s| {
            s.current_limit
                .as_ref()
                .map(|l| (l.requests_per_unit, l.unit()))
        })
        .collect();
    assert_eq!(limits, vec![Some((5, Unit::Day)), Some((100, Unit::Day))]);
}

#[test]
fn example_3_the_most_specific_match_wins_and_zero_blocks() {
    let e = engine(
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    let ip = |a: &str| req("edge_proxy_per_ip", vec![desc(&[("remote_address", a)])]);
    assert_eq!(admitted(&e, &ip("50.0.0.1"), 12, secs(1)), 10);
    assert_eq!(admitted(&e, &ip("50.0.0.5"), 3, secs(1)), 0);
    let r = decide(&e, &ip("50.0.0.5"), secs(5));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(0)
    );
}

#[test]
fn example_4_a_limit_applies_only_at_its_own_depth() {
    let shallow = engine(
        "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    let deep_request = req(
        "example4",
        vec![desc(&[("key", "value"), ("subkey", "subvalue")])],
    );
    let r = decide(&shallow, &deep_request, secs(1));
    assert!(
        r.statuses[0].current_limit.is_none(),
        "two entries do not match a one-level rule"
    );

    let deep = engine(
        "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    assert_eq!(admitted(&deep, &deep_request, 301, secs(1)), 300);
}

#[test]
fn example_5_unlimited_answers_ok_with_the_largest_remaining() {
    let e = engine(
        "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
    );
    let ldap = req("internal", vec![desc(&[("ldap", "x")])]);
    assert_eq!(admitted(&e, &ldap, 1_000, secs(1)), 1_000);
    let r = decide(&e, &ldap, secs(1));
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    let azure = req("internal", vec![desc(&[("azure", "x")])]);
    assert_eq!(admitted(&e, &azure, 150, secs(1)), 100);
}

#[test]
fn example_6_shadow_mode_never_refuses_but_is_counted() {
    let e = engine(
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    );
    let user = |u: &str| {
        req(
            "example6",
            vec![desc(&[("service", "auth-service"), ("user", u)])],
        )
    };
    assert_eq!(admitted(&e, &user("user-a"), 50, secs(1)), 50);
    assert_eq!(admitted(&e, &user("user-b"), 50, secs(1)), 20);
    let shadow = e
        .rules()
        .rules()
        .find(|r| r.shadow)
        .map(|r| r.totals().snapshot())
        .expect("the shadow rule");
    assert_eq!(shadow.2, 40, "40 of 50 would have been refused");
}

#[test]
fn example_7_replaces_drops_the_replaced_rule_and_leaves_it_untouched() {
    let e = engine(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let d1 = desc(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let d2 = desc(&[("key_2", "value_2"), ("user", "bkthomps")]);
    // Both together: only the replacing 10/s applies.
    let both = req("example7", vec![d1.clone(), d2.clone()]);
    assert_eq!(admitted(&e, &both, 12, secs(1)), 10);
    // The replaced 5/s limit was not charged by those requests.
    let alone = req("example7", vec![d1]);
    assert_eq!(admitted(&e, &alone, 6, secs(1)), 5);
}

#[test]
fn example_8_detailed_metric_is_accepted_and_values_still_limit_apart() {
    let e = engine(
        "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    let r = |v: &str| req("example8", vec![desc(&[("key1", v)])]);
    assert_eq!(admitted(&e, &r("a"), 12, secs(1)), 10);
    assert_eq!(admitted(&e, &r("b"), 12, secs(1)), 10);
    assert_eq!(admitted(&e, &r("value1"), 22, secs(1)), 20);
}

#[test]
fn example_9_wildcard_values_match_and_each_value_has_its_own_counter() {
    let e = engine(
        "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    let r = |v: &str| req("example9", vec![desc(&[("key1", v)])]);
    assert_eq!(admitted(&e, &r("value_1"), 25, secs(1)), 20);
    assert_eq!(admitted(&e, &r("value_2"), 25, secs(1)), 20);
    assert!(decide(&e, &r("other"), secs(1)).statuses[0]
        .current_limit
        .is_none());
}

#[test]
fn share_threshold_makes_every_matching_value_share_one_counter() {
    let e = engine(
        "domain: shared
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
",
    );
    let r = |v: &str| req("shared", vec![desc(&[("path", v)])]);
    assert_eq!(admitted(&e, &r("/api/a"), 6, secs(1)), 6);
    assert_eq!(admitted(&e, &r("/api/b"), 6, secs(1)), 4);
}

/// The quota-mode rules of envoyproxy/ratelimit's examples/ratelimit/config/example.yaml,
/// beside a rule that is not in quota mode.
const QUOTA_MODE: &str = "domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      service_with_quota:
        name: \"service_1\"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1
";

#[test]
fn quota_mode_refuses_only_when_every_quota_mode_descriptor_is_over() {
    let e = engine(QUOTA_MODE);
    let one = req("rl", vec![desc(&[("service", "service_1")])]);
    let both = req(
        "rl",
        vec![
            desc(&[("service", "service_1")]),
            desc(&[("service", "service_2")]),
        ],
    );
    // Alone, a quota-mode descriptor over its limit refuses (every one of
    // the request's quota-mode descriptors is over).
    assert_eq!(code(&decide(&e, &one, secs(1))), Code::Ok);
    assert_eq!(code(&decide(&e, &one, secs(1))), Code::OverLimit);
    // With another that has room: the request passes, the first shows
    // OVER_LIMIT, the second is charged.
    let r = decide(&e, &both, secs(1));
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(codes(&r), [Code::OverLimit, Code::Ok]);
    assert_eq!(r.statuses[1].limit_remaining, 1);
    let r = decide(&e, &both, secs(1));
    assert_eq!((code(&r), r.statuses[1].limit_remaining), (Code::Ok, 0));
    // Both over: refused, and nothing charged.
    let r = decide(&e, &both, secs(1));
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(codes(&r), [Code::OverLimit, Code::OverLimit]);
    // A rule not in quota mode refuses as always, quota room or not.
    let e = engine(QUOTA_MODE);
    let mixed = req(
        "rl",
        vec![desc(&[("service", "service_2")]), desc(&[("user", "u")])],
    );
    assert_eq!(code(&decide(&e, &mixed, secs(1))), Code::Ok);
    let r = decide(&e, &mixed, secs(1));
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(codes(&r), [Code::Ok, Code::OverLimit]);
    // The refused request charged nothing: service_2 still has one left.
    let r = decide(
        &e,
        &req("rl", vec![desc(&[("service", "service_2")])]),
        secs(1),
    );
    assert_eq!((code(&r), r.statuses[0].limit_remaining), (Code::Ok, 0));
}

#[test]
fn intentional_difference_gcra_has_no_window_boundary_burst_and_fixed_window_does() {
    let yaml = |algorithm: &str| {
        format!(
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 60{algorithm}
"
        )
    };
    let r = req("d", vec![desc(&[("k", "v")])]);
    // envoyproxy/ratelimit's fixed window: spend the limit at 59.5 s, then
    // again at 60.5 s — twice the limit within one second.
    let fixed = engine(&yaml("\n      algorithm: fixed_window"));
    let t1 = at(59_500_000_000);
    let t2 = at(60_500_000_000);
    assert_eq!(
        admitted(&fixed, &r, 60, t1) + admitted(&fixed, &r, 60, t2),
        120
    );
    // The default GCRA: the second second gets only what refilled.
    let gcra = engine(&yaml(""));
    assert_eq!(
        admitted(&gcra, &r, 60, t1) + admitted(&gcra, &r, 60, t2),
        61
    );
}

#[test]
fn fixed_windows_reset_on_the_unix_epochs_minute() {
    let options = ratewise_server::EngineOptions {
        // The process started 30 s into a minute.
        epoch_offset: std::time::Duration::from_secs(1_800_000_030),
        ..Default::default()
    };
    let e = engine_with(
        "domain: d
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: fixed_window }
",
        options,
    );
    let r = req("d", vec![desc(&[("k", "v")])]);
    assert_eq!(admitted(&e, &r, 3, secs(0)), 2);
    let refused = decide(&e, &r, secs(10));
    assert_eq!(code(&refused), Code::OverLimit);
    // 20 s left in the epoch's minute.
    assert_eq!(header(&refused, "retry-after"), Some("20"));
    assert_eq!(admitted(&e, &r, 3, secs(30)), 2, "a new minute");
}
