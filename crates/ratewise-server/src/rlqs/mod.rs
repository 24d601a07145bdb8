//! Envoy's Rate Limit Quota Service protocol (RLQS v3): the messages, the
//! server glue and a client. Data planes decide locally and report usage;
//! the service answers with each one's part of the quota.

mod messages;
mod service;

pub use messages::{
    AbandonAction, Action, BlanketRule, BucketAction, BucketId, BucketQuotaUsage,
    QuotaAssignmentAction, RateLimitQuotaResponse, RateLimitQuotaUsageReports, RateLimitStrategy,
    RequestsPerTimeUnit, Strategy, TokenBucket,
};
pub use service::{
    AssignmentStream, RateLimitQuotaClient, RateLimitQuotaService, RateLimitQuotaServiceServer,
    QUOTA_SERVICE_NAME, STREAM_QUOTAS_PATH,
};
