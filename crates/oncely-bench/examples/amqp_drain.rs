//! A bare lapin consumer: consume + ack `N` messages of an existing queue, nothing else, and
//! print its rate (timed from `basic.consume` to the last ack). The reference beside
//! `oncely demo --consume-only` and a bare pika consumer in `scripts/amqp-user-path.sh`.
//!
//! ```text
//! amqp_drain URL QUEUE N [PREFETCH]     # PREFETCH defaults to oncely's read-ahead, 512
//! ```

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, queue, n, rest @ ..] = args.as_slice() else {
        bail!("usage: amqp_drain URL QUEUE N [PREFETCH]");
    };
    let n: usize = n.parse().context("N")?;
    let prefetch: u16 = match rest.first() {
        Some(p) => p.parse().context("PREFETCH")?,
        None => {
            u16::try_from(2 * oncely_core::DEFAULT_CONCURRENCY * oncely_core::DEFAULT_GROUP_COMMIT)?
        }
    };
    let conn = lapin::Connection::connect(url, Default::default()).await?;
    let channel = conn.create_channel().await?;
    let started = Instant::now();
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let mut consumer = channel
        .basic_consume(
            queue.as_str().into(),
            "amqp_drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    for received in 0..n {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await;
        let Ok(Some(delivery)) = next else {
            bail!("amqp_drain: nothing more after {received} of {n}");
        };
        delivery?.ack(BasicAckOptions::default()).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "lapin: {n} messages in {secs:.2} s = {:.0} msgs/s (prefetch {prefetch})",
        n as f64 / secs
    );
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}
