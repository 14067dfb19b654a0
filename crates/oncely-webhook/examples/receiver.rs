//! A webhook receiver for Stripe, GitHub and Standard Webhooks on one database: each event's
//! row in `webhook_events` is written once, in the transaction of its inbox claim.
//!
//! ```sh
//! cargo run -p oncely-webhook --example receiver -- [database-url] [--check]
//! ```
//!
//! The URL defaults to a SQLite file in the temp directory. Secrets come from
//! `STRIPE_WEBHOOK_SECRET`, `GITHUB_WEBHOOK_SECRET` and `STANDARD_WEBHOOK_SECRET` (example
//! values otherwise). Without `--check` it serves `POST /hooks/{stripe,github,standard}` on
//! 127.0.0.1:3000; with it, it signs one Stripe event, posts it twice, checks that the first is
//! applied and the second a duplicate with one row, and exits.

use oncely_core::{Envelope, Error, Handled, Handler};
use oncely_sql::{AnyStore, AnyTx, SqlTx};
use oncely_webhook::{Endpoint, Verifier};
use std::time::{Duration, SystemTime};

/// Records each event: the handler's effect, in the claim's transaction.
struct Record {
    source: &'static str,
}

impl Handler<AnyTx> for Record {
    async fn handle(&self, tx: &mut AnyTx, event: &Envelope) -> Result<Handled, Error> {
        let sql = "INSERT INTO webhook_events (source, event_id, body) VALUES ($1, $2, $3)";
        let body = String::from_utf8_lossy(event.payload()).into_owned();
        tx.execute(
            sql,
            &[self.source.into(), event.id().as_str().into(), body.into()],
        )
        .await?;
        Ok(Handled::Applied)
    }
}

fn secret(var: &str, example: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        eprintln!("{var} not set; using an example secret");
        example.to_owned()
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    let default_url = format!(
        "sqlite:{}",
        std::env::temp_dir().join("oncely-webhooks.db").display()
    );
    let url = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or(default_url);

    let store = AnyStore::connect(&url).await?;
    store.migrate().await?;
    let ddl = "CREATE TABLE IF NOT EXISTS webhook_events (source VARCHAR(32) NOT NULL, event_id VARCHAR(255) NOT NULL, body TEXT NOT NULL)";
    store.pool().script(ddl).await?;

    let stripe_secret = secret("STRIPE_WEBHOOK_SECRET", "whsec_example_stripe");
    let stripe = Verifier::stripe([&stripe_secret])?;
    let github = Verifier::github([secret("GITHUB_WEBHOOK_SECRET", "example github secret")])?;
    let standard = Verifier::standard_webhooks([secret(
        "STANDARD_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )])?;
    let week = Duration::from_secs(7 * 86_400); // what `oncely prune --older-than 7d` keeps
    let stripe_hook = Endpoint::new(
        "stripe",
        store.clone(),
        Record { source: "stripe" },
        stripe.clone(),
    )
    .prune_window(week);
    stripe_hook.check_ready().await?;
    let app = axum::Router::new()
        .route("/hooks/stripe", stripe_hook.into_route())
        .route(
            "/hooks/github",
            Endpoint::new("github", store.clone(), Record { source: "github" }, github)
                .prune_window(week)
                .into_route(),
        )
        .route(
            "/hooks/standard",
            Endpoint::new(
                "standard",
                store.clone(),
                Record { source: "standard" },
                standard,
            )
            .prune_window(week)
            .into_route(),
        );

    let addr = if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    if !check {
        println!("listening on http://{local}/hooks/{{stripe,github,standard}} ({url})");
        axum::serve(listener, app).await?;
        return Ok(());
    }
    tokio::spawn(async move { axum::serve(listener, app).await });

    // --check: one Stripe event, sent twice, signed as Stripe signs.
    let id = format!("evt_example_{}", std::process::id());
    let body = format!(r#"{{"id":"{id}","object":"event","type":"invoice.paid"}}"#);
    let headers = stripe.sign(&id, body.as_bytes(), SystemTime::now());
    let client = reqwest::Client::new();
    let mut answers = Vec::new();
    for _ in 0..2 {
        let mut request = client
            .post(format!("http://{local}/hooks/stripe"))
            .body(body.clone());
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_bytes());
        }
        let response = request.send().await?;
        answers.push((response.status().as_u16(), response.text().await?));
    }
    let rows = store
        .pool()
        .fetch_i64(
            "SELECT COUNT(*) FROM webhook_events WHERE event_id = $1",
            &[id.as_str().into()],
        )
        .await?
        .unwrap_or(0);
    println!(
        "first: {:?}\nretry: {:?}\nrows for {id}: {rows}",
        answers[0], answers[1]
    );
    let ok = answers[0] == (200, r#"{"outcome":"applied"}"#.to_owned())
        && answers[1] == (200, r#"{"outcome":"duplicate"}"#.to_owned())
        && rows == 1;
    if !ok {
        return Err("the retry was not a duplicate of one applied event".into());
    }
    Ok(())
}
