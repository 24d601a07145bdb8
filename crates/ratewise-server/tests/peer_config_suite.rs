//! The cases of envoyproxy/ratelimit's own configuration tests (its
//! `test/config` suite), written anew for ratewise-server: each file that
//! service refuses is refused here too, with an error that names the file and
//! the offending part; each it loads, loads, and the limit a descriptor gets
//! (by key, value, wildcard and depth) is the one it gets there; and files of
//! one domain merge under `merge_domains` (its `MERGE_DOMAIN_CONFIG`) as they
//! merge there.

mod common;

use common::*;
use ratewise_server::config::{compile_sources, ConfigError, LoadOptions, RuleSet};
use ratewise_server::rls::{Code, Unit};
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
