//! The messages of Envoy's rate-limit service (RLS v3), written as prost
//! structs to the published wire format (`envoy/service/ratelimit/v3/rls.proto`
//! and the types it uses). Field numbers and types follow the proto; fields
//! this service never reads or writes (`quota`) are left out, which the
//! protobuf wire format allows: an unknown field is skipped on decode.

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    /// The configuration namespace the descriptors are looked up in.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The descriptors to limit on; every one must pass for the request to pass.
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    /// Units to charge each descriptor; 0 means 1.
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    /// The ordered key/value entries.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
    /// A limit supplied by Envoy that replaces the configured one.
    #[prost(message, optional, tag = "2")]
    pub limit: Option<RateLimitOverride>,
    /// Units to charge this descriptor; overrides the request's
    /// `hits_addend`. 0 looks without charging.
    #[prost(message, optional, tag = "3")]
    pub hits_addend: Option<UInt64Value>,
}

/// `RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Entry {
    /// The entry's key, e.g. `remote_address`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The entry's value, e.g. `10.0.0.1`.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `RateLimitDescriptor.RateLimitOverride`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct RateLimitOverride {
    /// Requests allowed per `unit`.
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// `envoy.type.v3.RateLimitUnit`, the same numbers as [`Unit`].
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
}

/// `google.protobuf.UInt64Value`.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct UInt64Value {
    /// The wrapped value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// The answer for the whole request.
    #[prost(enumeration = "Code", tag = "1")]
    pub overall_code: i32,
    /// One status per request descriptor, in the request's order.
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
    /// Headers Envoy adds to the response to the client.
    #[prost(message, repeated, tag = "3")]
    pub response_headers_to_add: Vec<HeaderValue>,
    /// Headers Envoy adds to the request sent upstream.
    #[prost(message, repeated, tag = "4")]
    pub request_headers_to_add: Vec<HeaderValue>,
    /// The body of Envoy's local reply when the request is limited.
    #[prost(bytes = "vec", tag = "5")]
    pub raw_body: Vec<u8>,
    /// Metadata Envoy makes available to access logs and later filters.
    #[prost(message, optional, tag = "6")]
    pub dynamic_metadata: Option<prost_types::Struct>,
}

/// `RateLimitResponse.DescriptorStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    /// The answer for this descriptor.
    #[prost(enumeration = "Code", tag = "1")]
    pub code: i32,
    /// The limit that applied; absent when no rule matched.
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    /// Units left in the current limit after this request.
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    /// How long until the limit is back at full capacity.
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<prost_types::Duration>,
}

/// `RateLimitResponse.RateLimit`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RateLimit {
    /// Requests allowed per `unit`.
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// The unit of time.
    #[prost(enumeration = "Unit", tag = "2")]
    pub unit: i32,
    /// The rule's name, for headers and logs.
    #[prost(string, tag = "3")]
    pub name: String,
}

/// `envoy.config.core.v3.HeaderValue`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct HeaderValue {
    /// The header's name.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The header's value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `RateLimitResponse.Code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Code {
    /// Never sent by this service (Envoy treats it as OK).
    Unknown = 0,
    /// Within the limit.
    Ok = 1,
    /// Over the limit.
    OverLimit = 2,
}

/// `RateLimitResponse.RateLimit.Unit` (and `envoy.type.v3.RateLimitUnit`,
/// which has the same numbers without `Week`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Unit {
    /// Not set.
    Unknown = 0,
    /// One second.
    Second = 1,
    /// One minute.
    Minute = 2,
    /// One hour.
    Hour = 3,
    /// One day.
    Day = 4,
    /// Thirty days, as Envoy counts a month.
    Month = 5,
    /// 365 days.
    Year = 6,
    /// Seven days.
    Week = 7,
}

impl Unit {
    /// The unit's length as Envoy counts it; `None` for [`Unit::Unknown`].
    pub const fn duration(self) -> Option<std::time::Duration> {
        const DAY: u64 = 86_400;
        let secs = match self {
            Unit::Unknown => return None,
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
            Unit::Week => 7 * DAY,
        };
        Some(std::time::Duration::from_secs(secs))
    }

    /// Every unit with a length, shortest first.
    pub const KNOWN: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit's name in the proto (`SECOND`, `MINUTE`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Unknown => "UNKNOWN",
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
            Unit::Week => "WEEK",
        }
    }

    /// The unit named `name` (case-insensitive: `second`, `MINUTE`, …).
    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::KNOWN
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(name))
    }
}
