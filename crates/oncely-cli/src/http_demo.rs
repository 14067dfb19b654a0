//! `oncely http-demo`: oncely-http's orders app (`oncely_http::orders_app`) behind the Idempotency-Key layer,
//! served on `--addr` until Ctrl-C.

use anyhow::{Context, Result};
use oncely_http::orders_app::{Orders, layer, router, setup};
use oncely_sql::{ConnectOptions, redact_url};
use std::time::Duration;

/// Flags of `oncely http-demo`.
#[derive(Debug, clap::Args)]
pub struct HttpDemoArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: String,
    /// Database URL (default: a temporary SQLite file). postgres:// and mysql:// work too.
    #[arg(long, env = "ONCELY_HTTP_DEMO_STORE")]
    pub store: Option<String>,
    /// Schema (PostgreSQL) or database (MySQL) the demo uses.
    #[arg(long, default_value = "oncely_http_demo")]
    pub schema: String,
    /// How long a completed key is replayed (e.g. 24h, 10m).
    #[arg(long, default_value = "24h", value_parser = oncely::ops::retention::parse_duration)]
    pub ttl: Duration,
    /// TESTING ONLY: `POST /orders` waits this long after its writes, before the commit, so
    /// the server can be killed mid-request.
    #[arg(
        long,
        hide = true,
        env = "ONCELY_HTTP_DEMO_DELAY_MS",
        default_value_t = 0
    )]
    pub handler_delay_ms: u64,
}

/// Runs the demo server until Ctrl-C (or SIGTERM).
pub async fn run(args: HttpDemoArgs) -> Result<bool> {
    let temp = tempfile::tempdir().context("creating a temporary directory")?;
    let url = args.store.clone().unwrap_or_else(|| {
        format!(
            "sqlite:{}",
            temp.path().join("oncely-http-demo.db").display()
        )
    });
    let pool = ConnectOptions::default().max_connections;
    let store = crate::demo::open_in_schema(&url, &args.schema, pool).await?;
    setup(&store).await?;
    let layer = layer(store.clone()).ttl(args.ttl);
    let orders =
        Orders::new(store.clone()).handler_delay(Duration::from_millis(args.handler_delay_ms));
    let app = router(orders, layer);
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .with_context(|| format!("listening on {}", args.addr))?;
    let addr = listener.local_addr()?;
    println!(
        "oncely http-demo listening on http://{addr} (store {})",
        redact_url(&url)
    );
    println!(
        "  POST /orders  (Authorization and Idempotency-Key required; keys belong to the Authorization value; JSON {{\"item\":\"book\",\"quantity\":2}})"
    );
    println!("  GET  /orders/{{id}}");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await
        .context("serving")?;
    Ok(true)
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
