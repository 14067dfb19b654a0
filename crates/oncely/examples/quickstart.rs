//! The README's quick start, runnable: one handler, written once, on SQLite, PostgreSQL or
//! MySQL/MariaDB (`tests/quickstart.rs` runs it on SQLite and PostgreSQL and checks that the
//! README shows this code).
//!
//! ```text
//! cargo run -p oncely --example quickstart -- [database-url]   # default: a SQLite file
//! ```

use oncely::{AnyStore, AnyTx, Consumer, Error, Handled, handler_fn};

/// Consumes `source` into the database `url` names until the source ends or Ctrl-C/SIGTERM.
pub async fn consume(
    url: &str,
    source: impl oncely::Source,
) -> oncely::Result<oncely::StatsSnapshot> {
    let store = AnyStore::connect(url).await?; // sqlite:, postgres://, mysql://
    store.migrate().await?; // or `oncely migrate --print` for your own tool
    let add_credits = handler_fn(|tx: &mut AnyTx, msg| {
        Box::pin(async move {
            let amount: i64 = std::str::from_utf8(msg.payload())
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::permanent("payload is not an amount"))?;
            let sql = "UPDATE accounts SET credits = credits + $1 WHERE id = 'a'"; // $1 on every database
            tx.execute(sql, &[amount.into()]).await?; // the same transaction as the claim
            Ok(Handled::Applied)
        })
    });
    let consumer = Consumer::new("billing", store, add_credits).concurrency(8);
    consumer.run_until_signal(source).await // any Source: RabbitMQ, NATS, Redis, MQTT, Kafka, memory
}

/// Creates the example's `accounts` table with account `a` at 0 credits.
pub async fn create_accounts(url: &str) -> Result<(), Error> {
    use oncely::Store;
    let store = AnyStore::connect(url).await?;
    let mut tx = store.begin().await?;
    let ddl = "CREATE TABLE accounts (id VARCHAR(16) PRIMARY KEY, credits BIGINT NOT NULL)";
    tx.execute(ddl, &[]).await?;
    tx.execute(
        "INSERT INTO accounts (id, credits) VALUES ($1, $2)",
        &["a".into(), 0.into()],
    )
    .await?;
    store.commit(tx).await?;
    store.pool().close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!("oncely-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::permanent(e.to_string()))?;
    let default = format!("sqlite:{}", dir.join("app.db").display());
    let url = std::env::args().nth(1).unwrap_or(default);
    create_accounts(&url).await?;
    // 100 messages of 5 credits; every third is delivered twice, as brokers do after a
    // lost ack.
    let source = oncely::MemorySource::new();
    for i in 0..100 {
        source.publish(oncely::RawEnvelope::new(format!("m-{i}"), "5"));
        if i % 3 == 0 {
            source.publish(oncely::RawEnvelope::new(format!("m-{i}"), "5"));
        }
    }
    source.close();
    let stats = consume(&url, source).await?;
    println!("{stats:?}");
    println!("expected 500 credits on account a");
    Ok(())
}
