//! The server side's header writer (`ratewise::response_headers`) read back by
//! this crate's parser: what one side writes, the other reads.

use std::time::Duration;

use ratewise::response_headers::{HeaderBuf, PolicyInfo};
use ratewise_client::headers::{parse_rate_limit_field, parse_rate_limit_policy_field};

#[test]
fn the_client_parser_reads_what_is_written() {
    let mut p = HeaderBuf::<128>::new();
    p.push_policy(&PolicyInfo {
        name: "burst",
        quota: 100,
        window: Duration::from_secs(10),
    })
    .unwrap();
    p.push_policy(&PolicyInfo {
        name: "day",
        quota: 10_000,
        window: Duration::from_secs(86_400),
    })
    .unwrap();
    let policies = parse_rate_limit_policy_field(p.as_bytes());
    assert_eq!(policies.len(), 2);
    assert_eq!(policies[1].policy.as_deref(), Some("day"));
    assert_eq!(policies[1].quota, Some(10_000));
    assert_eq!(policies[1].window, Some(Duration::from_secs(86_400)));
    let mut r = HeaderBuf::<128>::new();
    r.push_limit("burst", 3, Duration::from_secs(7)).unwrap();
    let items = parse_rate_limit_field(r.as_bytes());
    assert_eq!(items[0].remaining, Some(3));
    assert_eq!(items[0].reset, Some(Duration::from_secs(7)));
}
