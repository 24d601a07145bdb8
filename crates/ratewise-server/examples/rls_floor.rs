//! The floor for rate-limit service benchmarks: a tonic server that answers
//! every `ShouldRateLimit` OK at once (one OK status per descriptor), with
//! the same protocol code as ratewise-server. What a service costs beyond it
//! is the cost of deciding.
//!
//! ```text
//! cargo run --release -p ratewise-server --example rls_floor -- 127.0.0.1:9081
//! ```

use std::net::SocketAddr;

use ratewise_server::rls::{
    Code, DescriptorStatus, RateLimitRequest, RateLimitResponse, RateLimitService,
    RateLimitServiceServer,
};

// The service's allocator (its `main.rs`), so that the floor differs from
// it by the decision alone.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Floor;

impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let n = request.get_ref().descriptors.len();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                };
                n
            ],
            ..Default::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9081".into())
        .parse()?;
    println!("floor listening on {addr}");
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(RateLimitServiceServer::from_arc(std::sync::Arc::new(Floor)))
        .serve(addr)
        .await?;
    Ok(())
}
