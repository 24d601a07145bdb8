use ratewise::client::{Throttle, ThrottleConfig};
use ratewise_reqwest::{Refused, ThrottleMiddleware};

async fn fetch_all(urls: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    // One throttle for the whole process; partitions per host.
    let throttle = Throttle::new(ThrottleConfig::default())?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(ThrottleMiddleware::per_host(throttle))
        .build();
    for url in urls {
        match client.get(*url).send().await {
            Ok(response) => println!("{url}: {}", response.status()),
            Err(e) => match Refused::from_error(&e) {
                // The client declined to send (your deadline, the retry
                // budget) or could not replay a streamed body.
                Some(refused) if refused.is_client_side() => eprintln!("{url}: {refused}"),
                _ => return Err(e.into()),
            },
        }
    }
    Ok(())
}
