//! Envoy's rate-limit service protocol (RLS v3): the messages, the server
//! glue and a client.

mod messages;
mod service;

pub use messages::{
    Code, DescriptorStatus, Entry, HeaderValue, RateLimit, RateLimitDescriptor, RateLimitOverride,
    RateLimitRequest, RateLimitResponse, UInt64Value, Unit,
};
pub use service::{
    RateLimitClient, RateLimitService, RateLimitServiceServer, SERVICE_NAME, SHOULD_RATE_LIMIT_PATH,
};
