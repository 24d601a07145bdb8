//! The cases of envoyproxy/ratelimit's own configuration tests (its
//! `test/config` suite), written anew for ratewise-server: each file that
//! service refuses is refused here too, with an error that names the file and
//! the offending part; each it loads, loads, and the limit a descriptor gets
//! (by key, value, wildcard and depth) is the one it gets there; and files of
//! one domain merge under `merge_domains` (its `MERGE_DOMAIN_CONFIG`) as they
//! merge there. The `share_threshold` cases, the per-request limit override
//! and per-rule shadow mode are there too.

mod common;

use common::*;
use ratewise_server::config::{compile_sources, ConfigError, LoadOptions, RuleSet};
use ratewise_server::rls::{Code, RateLimitDescriptor, RateLimitOverride, Unit};
use ratewise_server::{Engine, EngineOptions};

fn load(files: &[(&str, &str)], merge_domains: bool) -> Result<RuleSet, ConfigError> {
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|(name, text)| (name.to_string(), text.to_string()))
        .collect();
    let options = LoadOptions {
        merge_domains,
        ..LoadOptions::default()
    };
    compile_sources(&sources, None, options)
}

/// The error loading `text` as `name` alone, which must name the file and
/// contain each of `parts`.
fn refused(name: &str, text: &str, parts: &[&str]) {
    let e = match load(&[(name, text)], false) {
        Ok(_) => panic!("{name} loaded; it must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(name), "the error names no file: {e}");
    for part in parts {
        assert!(e.contains(part), "the error does not say `{part}`: {e}");
    }
}

#[test]
fn an_empty_domain_is_refused() {
    refused(
        "empty_domain.yaml",
        "domain: \"\"\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
        &["domain", "empty"],
    );
}

#[test]
fn a_descriptor_without_a_key_is_refused() {
    refused(
        "empty_key.yaml",
        "domain: d\ndescriptors:\n  - value: v\n",
        &["key", "line 3"],
    );
    refused(
        "blank_key.yaml",
        "domain: d\ndescriptors:\n  - key: \"\"\n    value: v\n",
        &["key", "empty"],
    );
}

#[test]
fn one_key_and_value_twice_at_one_level_is_refused() {
    refused(
        "duplicate_key.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n\n  - key: k\n    value: v\n",
        &["descriptors[1]", "k=v", "twice"],
    );
}

#[test]
fn an_unknown_unit_is_refused_with_the_units_there_are() {
    refused(
        "bad_limit_unit.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
        &["fortnight", "second", "line 6"],
    );
}

#[test]
fn replacing_itself_or_an_unnamed_rule_is_refused() {
    // A nested rule named `me` whose `replaces` list holds `entry`.
    let replacing = |entry: &str| {
        format!(
            "domain: d
descriptors:
  - key: k
    value: v
    descriptors:
      - key: s
        rate_limit:
          name: me
          replaces:
            - name:{entry}
          unit: second
          requests_per_unit: 5
"
        )
    };
    refused(
        "replaces_self.yaml",
        &replacing(" me"),
        &["replaces", "`me`"],
    );
    refused(
        "replaces_empty.yaml",
        &replacing(""),
        &["replaces", "empty"],
    );
}

#[test]
fn yaml_that_does_not_parse_is_refused_with_its_line() {
    refused("bad_yaml.yaml", "'''\n", &["line 2"]);
}

#[test]
fn a_misspelled_key_is_refused_by_name() {
    refused(
        "misspelled_key.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
        &["`ratelimit`", "rate_limit"],
    );
    refused(
        "misspelled_key2.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
        &["`requestsperunit`", "requests_per_unit"],
    );
}

#[test]
fn a_key_that_is_not_a_string_is_refused() {
    refused(
        "non_string_key.yaml",
        "0.25: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n",
        &["0.25"],
    );
}

#[test]
fn a_list_item_that_is_not_a_descriptor_is_refused() {
    refused(
        "non_map_list.yaml",
        "domain: d\ndescriptors:\n  - a\n  - b\n",
        &["descriptors[0]", "line 3"],
    );
}

#[test]
fn unlimited_with_a_unit_is_refused() {
    refused(
        "unlimited_with_unit.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
        &["unit", "unlimited"],
    );
}

#[test]
fn a_domain_with_no_descriptors_loads_and_limits_nothing() {
    for text in ["domain: d\n", "domain: d\ndescriptors:\n"] {
        let set = load(&[("bare.yaml", text)], false)
            .unwrap_or_else(|e| panic!("{text:?} must load: {e}"));
        assert_eq!(set.domain_names(), ["d"]);
        assert_eq!(set.rules().count(), 0);
    }
}

const FIRST: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
";
const SECOND: &str = "domain: test-domain
descriptors:
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

#[test]
fn two_files_of_one_domain_are_refused_unless_merged() {
    let e = load(&[("a.yaml", FIRST), ("b.yaml", SECOND)], false)
        .expect_err("a domain in two files is refused by default")
        .to_string();
    for part in ["test-domain", "a.yaml", "b.yaml", "--merge-domains"] {
        assert!(e.contains(part), "{e}");
    }
}

#[test]
fn merged_files_of_one_domain_each_keep_their_limits() {
    let set = load(&[("a.yaml", FIRST), ("b.yaml", SECOND)], true).expect("merged");
    assert_eq!(set.domain_names(), ["test-domain"]);
    assert_eq!(set.sources, ["a.yaml", "b.yaml"]);
    let e = Engine::new(set, EngineOptions::default());
    let one = req("test-domain", vec![desc(&[("key1", "value1")])]);
    let two = req("test-domain", vec![desc(&[("key2", "value2")])]);
    assert_eq!(admitted(&e, &one, 30, secs(1)), 10);
    assert_eq!(admitted(&e, &two, 30, secs(1)), 20);
    let r = decide(&e, &one, secs(1));
    assert_eq!(code(&r), Code::OverLimit);
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(10)
    );
}

#[test]
fn merging_a_descriptor_defined_twice_is_refused() {
    let e = load(&[("a.yaml", FIRST), ("again.yaml", FIRST)], true)
        .expect_err("the same top-level descriptor twice")
        .to_string();
    for part in ["key1=value1", "a.yaml", "again.yaml"] {
        assert!(e.contains(part), "{e}");
    }
    // A wildcard and a key alone are descriptors too.
    let wild = "domain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    let e = load(&[("a.yaml", wild), ("b.yaml", wild)], true)
        .expect_err("the same wildcard twice")
        .to_string();
    assert!(e.contains("path=/api/*"), "{e}");
    let any = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    let e = load(&[("a.yaml", any), ("b.yaml", any)], true)
        .expect_err("the same key twice")
        .to_string();
    assert!(e.contains("`user`"), "{e}");
}

#[test]
fn merged_files_may_not_disagree_on_the_failure_policy() {
    let with = |policy: &str, key: &str| {
        format!("domain: d\nfailure_policy: {policy}\ndescriptors:\n  - key: {key}\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\n")
    };
    let e = load(
        &[
            ("a.yaml", &with("open", "a")),
            ("b.yaml", &with("closed", "b")),
        ],
        true,
    )
    .expect_err("open and closed")
    .to_string();
    for part in ["failure_policy: closed", "a.yaml", "b.yaml"] {
        assert!(e.contains(part), "{e}");
    }
    // One file stating it, or both the same, is one policy.
    let plain = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    assert!(load(&[("a.yaml", &with("closed", "a")), ("b.yaml", plain)], true).is_ok());
    assert!(load(
        &[
            ("a.yaml", &with("local", "a")),
            ("b.yaml", &with("local", "b"))
        ],
        true
    )
    .is_ok());
}

/// What `entries` of `domain` are limited by: `Some((requests_per_unit,
/// unit, name))`, `Some((u32::MAX, …))` for an unlimited rule (OK with the
/// largest remaining), or `None` when no rule matches.
fn limit_of(e: &Engine, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, Unit, String)> {
    let r = decide(e, &req(domain, vec![desc(entries)]), secs(1));
    let status = &r.statuses[0];
    match &status.current_limit {
        Some(l) => Some((l.requests_per_unit, l.unit(), l.name.clone())),
        None if status.limit_remaining == u32::MAX => {
            Some((u32::MAX, Unit::Unknown, String::new()))
        }
        None => None,
    }
}

/// The shapes of the peer's basic configuration: limits by key alone, by
/// key and value, a value with no limit under a key with one, nested keys,
/// a named rule, an unlimited one.
const BASIC: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: { unit: second, requests_per_unit: 5 }
      - key: subkey1
        value: subvalue1
        rate_limit: { unit: second, requests_per_unit: 10 }
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key2
    value: value2
    rate_limit: { unit: minute, requests_per_unit: 30 }
  - key: key2
    value: value3
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: key4
    rate_limit: { name: key4_rate_limit, unit: day, requests_per_unit: 1 }
  - key: key5
    value: value5
    rate_limit: { unit: day, requests_per_unit: 15 }
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: { unit: day, requests_per_unit: 25 }
  - key: key6
    rate_limit: { unlimited: true }
  - key: key7
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 70 }
";

#[test]
fn the_basic_configuration_matches_as_the_peer_does() {
    let e = engine(BASIC);
    let rpu = |entries: &[(&str, &str)]| limit_of(&e, "test-domain", entries).map(|l| (l.0, l.1));
    // Nothing configured for the domain or the entries: no limit.
    assert_eq!(limit_of(&e, "foo_domain", &[("key1", "value1")]), None);
    assert_eq!(rpu(&[("key1", "something")]), None);
    // A node with no limit of its own limits nothing.
    assert_eq!(rpu(&[("key1", "value1")]), None);
    // Entries deeper than the tree, or a value the second level does not
    // name, match nothing: a limit applies only where the entries end.
    assert_eq!(rpu(&[("key2", "value2"), ("subkey", "subvalue")]), None);
    assert_eq!(rpu(&[("key5", "value5"), ("subkey5", "subvalue")]), None);
    // A key alone, and a value that overrides it.
    assert_eq!(
        rpu(&[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Unit::Second))
    );
    assert_eq!(
        rpu(&[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Unit::Second))
    );
    assert_eq!(rpu(&[("key2", "something")]), Some((20, Unit::Minute)));
    assert_eq!(rpu(&[("key2", "value2")]), Some((30, Unit::Minute)));
    // A value listed with no limit exempts it from the key's.
    assert_eq!(rpu(&[("key2", "value3")]), None);
    assert_eq!(rpu(&[("key3", "foo")]), Some((1, Unit::Hour)));
    let named = limit_of(&e, "test-domain", &[("key4", "foo")]).unwrap();
    assert_eq!(
        (named.0, named.1, named.2.as_str()),
        (1, Unit::Day, "key4_rate_limit")
    );
    assert_eq!(rpu(&[("key5", "value5")]), Some((15, Unit::Day)));
    assert_eq!(
        rpu(&[("key5", "value5"), ("subkey5", "subvalue5")]),
        Some((25, Unit::Day))
    );
    assert_eq!(rpu(&[("key6", "foo")]).map(|l| l.0), Some(u32::MAX));
    // detailed_metric changes what is counted in metrics, not the limit.
    assert_eq!(
        rpu(&[("key7", "unspecified_value")]),
        Some((70, Unit::Minute))
    );
    assert_eq!(rpu(&[("key7", "another_value")]), Some((70, Unit::Minute)));
}

const WILDCARDS: &str = "domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: noWild
    value: foo
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: noVal
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: midWild
    value: bar*b
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: multiWild
    value: foo*bar*baz
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: { unit: minute, requests_per_unit: 20 }
";

#[test]
fn wildcard_values_match_as_the_peer_does() {
    let e = engine(WILDCARDS);
    let rpu = |entries: &[(&str, &str)]| limit_of(&e, "test-domain", entries).map(|l| l.0);
    for (entries, limit) in [
        (&[("noVal", "foo1")][..], Some(20)),
        (&[("wild", "foo1")][..], Some(20)),
        (&[("wild", "foo")][..], Some(20)),
        (&[("nestedWild", "val1"), ("wild", "goo2")][..], Some(20)),
        (&[("wild", "bar")][..], None),
        // A value without `*` matches only itself.
        (&[("noWild", "foo1")][..], None),
        (&[("noWild", "foo")][..], Some(20)),
        // A `*` in the middle: the prefix and the suffix, anything (or
        // nothing) between.
        (&[("midWild", "barab")][..], Some(20)),
        (&[("midWild", "bar123b")][..], Some(20)),
        (&[("midWild", "barb")][..], Some(20)),
        (&[("midWild", "bara")][..], None),
        (&[("midWild", "xbarb")][..], None),
        // Several: each part in order.
        (&[("multiWild", "foo123bar456baz")][..], Some(10)),
        (&[("multiWild", "foobarbaz")][..], Some(10)),
        (&[("multiWild", "foobaz")][..], None),
        (&[("multiWild", "foobazbar")][..], None),
    ] {
        assert_eq!(rpu(entries), limit, "{entries:?}");
    }
    // Values that match one wildcard each have their own counter (on a
    // fresh engine: the lookups above charged theirs).
    let e = engine(WILDCARDS);
    let a = req("test-domain", vec![desc(&[("wild", "foo1")])]);
    let b = req("test-domain", vec![desc(&[("wild", "foo2")])]);
    assert_eq!(admitted(&e, &a, 30, secs(1)), 20);
    assert_eq!(admitted(&e, &b, 30, secs(1)), 20);
}

#[test]
fn a_descriptor_no_rule_matches_is_ok_with_no_limit_and_nothing_remaining() {
    // As the peer answers it: OK, no current_limit, limit_remaining 0.
    let e = engine(BASIC);
    let r = decide(&e, &req("foo", vec![desc(&[("hello", "world")])]), secs(1));
    assert_eq!(code(&r), Code::Ok);
    assert_eq!(r.statuses.len(), 1);
    let s = &r.statuses[0];
    assert_eq!(
        (s.code(), s.current_limit.is_none(), s.limit_remaining),
        (Code::Ok, true, 0)
    );
    assert!(s.duration_until_reset.is_none(), "{s:?}");
}

/// The shapes of the peer's `share_threshold` configuration: a wildcard
/// value whose matches share one counter, alone, nested, twice on one key,
/// under a parent that shares while the child does not, beside an exact
/// value that keeps its own counter, and with `*` in the middle.
const SHARED: &str = "domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: { unit: minute, requests_per_unit: 200 }
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: { unit: minute, requests_per_unit: 300 }
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 60 }
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: { unit: minute, requests_per_unit: 80 }
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: { unit: minute, requests_per_unit: 120 }
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit: { unit: minute, requests_per_unit: 150 }
  - key: file
    value: test1
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: file
    value: test*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit: { unit: minute, requests_per_unit: 80 }
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: { unit: minute, requests_per_unit: 60 }
";

/// One descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

/// Requests admitted of `n` sent for each descriptor in turn, round-robin,
/// at one instant: how many a set of descriptors gets between them.
fn admitted_across(e: &Engine, descriptors: &[Entries], n: usize) -> usize {
    (0..n)
        .filter(|i| {
            let d = descriptors[i % descriptors.len()];
            code(&decide(e, &req("test-domain", vec![desc(d)]), secs(1))) == Code::Ok
        })
        .count()
}

#[test]
fn shared_thresholds_match_as_the_peer_does() {
    let e = engine(SHARED);
    let rpu = |entries: &[(&str, &str)]| limit_of(&e, "test-domain", entries).map(|l| l.0);
    for (entries, limit) in [
        (&[("files", "files/a.pdf")][..], Some(100)),
        (&[("files", "files/b.csv")][..], Some(100)),
        (&[("route", "api/v1"), ("method", "GET")][..], Some(60)),
        (
            &[("service", "svc/user"), ("endpoint", "get")][..],
            Some(80),
        ),
        (
            &[("nested", "parent"), ("files", "nested/file1.txt")][..],
            Some(200),
        ),
        (
            &[("files", "top/file1.txt"), ("files", "nested/file1.txt")][..],
            Some(300),
        ),
        (
            &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")][..],
            Some(120),
        ),
        (
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ][..],
            Some(150),
        ),
        // An exact value wins over a wildcard that also matches it.
        (&[("file", "test1")][..], Some(50)),
        (&[("file", "test2")][..], Some(100)),
        (&[("file", "test123")][..], Some(100)),
        (&[("midpath", "/api/v1")][..], Some(100)),
        (&[("midpath", "/apiXYZv1")][..], Some(100)),
        (&[("midpath", "/api/v2")][..], None),
        (&[("multiroute", "svceprpc")][..], Some(50)),
        (&[("multiroute", "svcXXXepYYYrpc")][..], Some(50)),
        (&[("multiroute", "svcABCrpc")][..], None),
        (&[("midroute", "/api-beta-v2")][..], Some(80)),
        (
            &[("tenant", "t1prod"), ("resource", "resAv2")][..],
            Some(60),
        ),
    ] {
        assert_eq!(rpu(entries), limit, "{entries:?}");
    }
}

#[test]
fn values_matching_a_shared_threshold_share_one_counter() {
    // Each case on a fresh engine: the values that match one shared
    // wildcard get its limit between them, not each.
    let shared: [(&[Entries], usize); 6] = [
        (
            &[
                &[("files", "files/a.pdf")],
                &[("files", "files/b.csv")],
                &[("files", "files/c.txt")],
            ],
            100,
        ),
        (
            &[
                &[("file", "test2")],
                &[("file", "test23")],
                &[("file", "test123")],
            ],
            100,
        ),
        (
            &[
                &[("midpath", "/api/v1")],
                &[("midpath", "/api-beta-v1")],
                &[("midpath", "/apiXYZv1")],
            ],
            100,
        ),
        (
            &[
                &[("multiroute", "svcAepBrpc")],
                &[("multiroute", "svceprpc")],
            ],
            50,
        ),
        (
            &[&[("midroute", "/api/v2")], &[("midroute", "/api-beta-v2")]],
            80,
        ),
        (
            &[
                &[("tenant", "t1prod"), ("resource", "resAv2")],
                &[("tenant", "t99prod"), ("resource", "resBBBv2")],
            ],
            60,
        ),
    ];
    for (descriptors, limit) in shared {
        let e = engine(SHARED);
        assert_eq!(
            admitted_across(&e, descriptors, 3 * limit),
            limit,
            "{descriptors:?}"
        );
    }
    // Both levels shared: every user and resource under the patterns share.
    let e = engine(SHARED);
    let both: &[Entries] = &[
        &[
            ("user", "user/alice"),
            ("resource", "res/a"),
            ("action", "read"),
        ],
        &[
            ("user", "user/bob"),
            ("resource", "res/b"),
            ("action", "read"),
        ],
    ];
    assert_eq!(admitted_across(&e, both, 450), 150);
    // The parent shares and the child does not: one counter per `file`
    // value, whatever the `path` value.
    let e = engine(SHARED);
    let doc1: &[Entries] = &[
        &[("path", "path/a"), ("file", "file/doc1"), ("type", "pdf")],
        &[("path", "path/b"), ("file", "file/doc1"), ("type", "pdf")],
    ];
    let doc2: &[Entries] = &[&[("path", "path/a"), ("file", "file/doc2"), ("type", "pdf")]];
    assert_eq!(admitted_across(&e, doc1, 360), 120);
    assert_eq!(admitted_across(&e, doc2, 360), 120);
    // The exact value keeps its own counter beside the shared one.
    let e = engine(SHARED);
    assert_eq!(admitted_across(&e, &[&[("file", "test1")]], 150), 50);
    assert_eq!(
        admitted_across(&e, &[&[("file", "test2")], &[("file", "test9")]], 300),
        100
    );
}

/// A descriptor with the peer's per-request limit override.
fn overridden(entries: &[(&str, &str)], requests_per_unit: u32, unit: Unit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit as i32,
        }),
        ..desc(entries)
    }
}

#[test]
fn a_limit_override_applies_as_the_peer_does() {
    let e = engine(BASIC);
    let limit = |domain: &str, d: RateLimitDescriptor| {
        let r = decide(&e, &req(domain, vec![d]), secs(1));
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| (l.requests_per_unit, l.unit()))
    };
    // A domain with no configuration limits nothing, override or not.
    assert_eq!(
        limit(
            "foo_domain",
            overridden(&[("key1", "value1")], 10, Unit::Day)
        ),
        None
    );
    let something = [("key1", "value1"), ("subkey1", "something")];
    assert_eq!(
        limit("test-domain", overridden(&something, 10, Unit::Day)),
        Some((10, Unit::Day))
    );
    // Another override on the same descriptor is the limit now.
    assert_eq!(
        limit("test-domain", overridden(&something, 42, Unit::Hour)),
        Some((42, Unit::Hour))
    );
    // Each value has its own counter under an override.
    let e = engine(BASIC);
    let one = req("test-domain", vec![overridden(&something, 3, Unit::Minute)]);
    let other = req(
        "test-domain",
        vec![overridden(
            &[("key1", "value1"), ("subkey1", "else")],
            3,
            Unit::Minute,
        )],
    );
    assert_eq!(admitted(&e, &one, 5, secs(1)), 3);
    assert_eq!(admitted(&e, &other, 5, secs(1)), 3);
}

#[test]
fn shadow_mode_applies_per_rule_as_the_peer_does() {
    let e = engine(
        "domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: { unit: second, requests_per_unit: 5 }
      - key: subkey1
        value: subvalue1
        rate_limit: { unit: second, requests_per_unit: 10 }
        shadow_mode: true
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
    shadow_mode: true
  - key: key2
    value: value2
    rate_limit: { unit: minute, requests_per_unit: 30 }
",
    );
    let r = |entries: &[(&str, &str)]| req("test-domain", vec![desc(entries)]);
    // Enforced: the key's default, and a value's own limit under a shadowed
    // default.
    assert_eq!(
        admitted(&e, &r(&[("key1", "value1"), ("subkey1", "x")]), 8, secs(1)),
        5
    );
    assert_eq!(admitted(&e, &r(&[("key2", "value2")]), 40, secs(1)), 30);
    // Shadowed: never refused, though counted against the same limits.
    assert_eq!(
        admitted(
            &e,
            &r(&[("key1", "value1"), ("subkey1", "subvalue1")]),
            15,
            secs(1)
        ),
        15
    );
    assert_eq!(admitted(&e, &r(&[("key2", "something")]), 25, secs(1)), 25);
    let shadowed = decide(&e, &r(&[("key2", "something")]), secs(1));
    let l = shadowed.statuses[0]
        .current_limit
        .as_ref()
        .expect("the limit");
    assert_eq!((l.requests_per_unit, l.unit()), (20, Unit::Minute));
}
