//! Helpers shared by the engine tests: build an engine from YAML, make
//! requests, read answers.
#![allow(dead_code)]

use ratewise::Timestamp;
use ratewise_server::config::{compile_sources, LoadOptions};
use ratewise_server::rls::{
    Code, Entry, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, UInt64Value,
};
use ratewise_server::{Engine, EngineOptions};

/// An engine deciding by the one YAML file `yaml`.
pub fn engine(yaml: &str) -> Engine {
    engine_with(yaml, EngineOptions::default())
}

/// As [`engine`], with options.
pub fn engine_with(yaml: &str, options: EngineOptions) -> Engine {
    let rules = compile_sources(
        &[("test.yaml".into(), yaml.into())],
        None,
        LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("the test's YAML must load: {e}"));
    Engine::new(rules, options)
}

/// A descriptor from `key=value` pairs.
pub fn desc(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// `desc` with its own hits_addend.
pub fn desc_hits(pairs: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..desc(pairs)
    }
}

/// A request in `domain` with `descriptors`.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// Nanoseconds as a timestamp.
pub fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos)
}

/// Seconds as a timestamp.
pub fn secs(s: u64) -> Timestamp {
    Timestamp::from_nanos(s * 1_000_000_000)
}

/// Decides and unwraps.
pub fn decide(engine: &Engine, request: &RateLimitRequest, now: Timestamp) -> RateLimitResponse {
    engine
        .decide_at(request, now)
        .unwrap_or_else(|e| panic!("the request must be decided: {e}"))
}

/// The overall code.
pub fn code(r: &RateLimitResponse) -> Code {
    r.overall_code()
}

/// Each status's code.
pub fn codes(r: &RateLimitResponse) -> Vec<Code> {
    r.statuses.iter().map(|s| s.code()).collect()
}

/// How many of `n` identical requests at `now` are answered OK.
pub fn admitted(engine: &Engine, request: &RateLimitRequest, n: usize, now: Timestamp) -> usize {
    (0..n)
        .filter(|_| code(&decide(engine, request, now)) == Code::Ok)
        .count()
}

/// The value of the response header `name`, if Envoy is asked to add it.
pub fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}
