//! The messages of Envoy's Rate Limit Quota Service (RLQS v3), written as
//! prost structs to the published wire format
//! (`envoy/service/rate_limit_quota/v3/rlqs.proto`,
//! `envoy/type/v3/ratelimit_strategy.proto`, `token_bucket.proto`).
//!
//! The usage reports' field 2 changed shape upstream: a `repeated
//! BucketQuotaUsage` in the Envoy releases that ship the filter, a
//! `map<uint64, BucketQuotaUsage>` later. Both are read
//! ([`RateLimitQuotaUsageReports::usages`]).

use std::collections::BTreeMap;

use prost::Message;

/// `envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitQuotaUsageReports {
    /// The application domain; sent in the stream's first message.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Each element a `BucketQuotaUsage`, or a map entry holding one; read
    /// them with [`RateLimitQuotaUsageReports::usages`].
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub bucket_quota_usages: Vec<Vec<u8>>,
}

/// A map entry of the later form of field 2.
#[derive(Clone, PartialEq, prost::Message)]
struct UsageEntry {
    #[prost(uint64, tag = "1")]
    key: u64,
    #[prost(message, optional, tag = "2")]
    value: Option<BucketQuotaUsage>,
}

impl RateLimitQuotaUsageReports {
    /// A report of `usages`, in the list form.
    pub fn new(domain: impl Into<String>, usages: &[BucketQuotaUsage]) -> Self {
        RateLimitQuotaUsageReports {
            domain: domain.into(),
            bucket_quota_usages: usages.iter().map(Message::encode_to_vec).collect(),
        }
    }

    /// The usages, whichever form field 2 came in.
    ///
    /// # Errors
    /// [`prost::DecodeError`] for an element that is neither.
    pub fn usages(&self) -> Result<Vec<BucketQuotaUsage>, prost::DecodeError> {
        self.bucket_quota_usages
            .iter()
            .map(|raw| {
                // A map entry starts with its key: field 1 as a varint (tag
                // byte 0x08); a usage starts with its bucket id, field 1
                // length-delimited (0x0a).
                if raw.first() == Some(&0x08) {
                    let entry = UsageEntry::decode(raw.as_slice())?;
                    Ok(entry.value.unwrap_or_default())
                } else {
                    BucketQuotaUsage::decode(raw.as_slice())
                }
            })
            .collect()
    }
}

/// `RateLimitQuotaUsageReports.BucketQuotaUsage`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketQuotaUsage {
    /// The bucket.
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    /// Time since the previous report of this bucket.
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<prost_types::Duration>,
    /// Requests the data plane let through.
    #[prost(uint64, tag = "3")]
    pub num_requests_allowed: u64,
    /// Requests it refused.
    #[prost(uint64, tag = "4")]
    pub num_requests_denied: u64,
}

/// `envoy.service.rate_limit_quota.v3.BucketId`: an unordered map.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct BucketId {
    /// The bucket's key/value pairs.
    #[prost(btree_map = "string, string", tag = "1")]
    pub bucket: BTreeMap<String, String>,
}

/// `envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitQuotaResponse {
    /// Actions, applied in order.
    #[prost(message, repeated, tag = "1")]
    pub bucket_action: Vec<BucketAction>,
}

/// `RateLimitQuotaResponse.BucketAction`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketAction {
    /// The bucket acted on.
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    /// Assign or abandon.
    #[prost(oneof = "Action", tags = "2, 3")]
    pub action: Option<Action>,
}

/// `BucketAction.bucket_action`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Action {
    /// Enforce a strategy for a time.
    #[prost(message, tag = "2")]
    QuotaAssignmentAction(QuotaAssignmentAction),
    /// Forget the bucket.
    #[prost(message, tag = "3")]
    AbandonAction(AbandonAction),
}

/// `BucketAction.QuotaAssignmentAction`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaAssignmentAction {
    /// How long the assignment holds; unset is forever.
    #[prost(message, optional, tag = "2")]
    pub assignment_time_to_live: Option<prost_types::Duration>,
    /// What to enforce; unset allows all.
    #[prost(message, optional, tag = "3")]
    pub rate_limit_strategy: Option<RateLimitStrategy>,
}

/// `BucketAction.AbandonAction`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct AbandonAction {}

/// `envoy.type.v3.RateLimitStrategy`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitStrategy {
    /// The strategy.
    #[prost(oneof = "Strategy", tags = "1, 2, 3")]
    pub strategy: Option<Strategy>,
}

/// `RateLimitStrategy.strategy`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Strategy {
    /// Allow all or deny all ([`BlanketRule`]).
    #[prost(enumeration = "BlanketRule", tag = "1")]
    BlanketRule(i32),
    /// A number of requests per unit of time.
    #[prost(message, tag = "2")]
    RequestsPerTimeUnit(RequestsPerTimeUnit),
    /// A token bucket.
    #[prost(message, tag = "3")]
    TokenBucket(TokenBucket),
}

/// `RateLimitStrategy.BlanketRule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BlanketRule {
    /// Let every request through.
    AllowAll = 0,
    /// Refuse every request.
    DenyAll = 1,
}

/// `RateLimitStrategy.RequestsPerTimeUnit`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct RequestsPerTimeUnit {
    /// Requests per `time_unit`; 0 denies all.
    #[prost(uint64, tag = "1")]
    pub requests_per_time_unit: u64,
    /// `envoy.type.v3.RateLimitUnit`.
    #[prost(enumeration = "crate::rls::Unit", tag = "2")]
    pub time_unit: i32,
}

/// `envoy.type.v3.TokenBucket`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TokenBucket {
    /// Capacity, and the tokens at the start.
    #[prost(uint32, tag = "1")]
    pub max_tokens: u32,
    /// Tokens added each `fill_interval` (unset: 1).
    #[prost(message, optional, tag = "2")]
    pub tokens_per_fill: Option<u32>,
    /// How often tokens are added.
    #[prost(message, optional, tag = "3")]
    pub fill_interval: Option<prost_types::Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(user: &str, allowed: u64) -> BucketQuotaUsage {
        BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: BTreeMap::from([("user".to_string(), user.to_string())]),
            }),
            time_elapsed: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: 0,
        }
    }

    #[test]
    fn usages_are_read_in_the_list_form_and_the_map_form() {
        let list = RateLimitQuotaUsageReports::new("edge", &[usage("a", 3), usage("b", 0)]);
        let decoded = RateLimitQuotaUsageReports::decode(list.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            decoded.usages().unwrap(),
            vec![usage("a", 3), usage("b", 0)]
        );

        let map = RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![UsageEntry {
                key: 7,
                value: Some(usage("c", 5)),
            }
            .encode_to_vec()],
        };
        assert_eq!(map.usages().unwrap(), vec![usage("c", 5)]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let bad = RateLimitQuotaUsageReports {
            domain: "edge".into(),
            bucket_quota_usages: vec![vec![0x0a, 0xff]],
        };
        assert!(bad.usages().is_err());
    }
}
