//! Your own admin binary: the `oncely` admin commands (migrate, prune, partition, stats,
//! inspect, dlq list/show/replay/resolve/purge) with your handlers registered, so that
//! `dlq replay` re-runs a dead letter through the same code your consumer runs.
//!
//! ```text
//! cargo run -p oncely --features cli --example admin -- dlq list --database sqlite:app.db
//! cargo run -p oncely --features cli --example admin -- dlq replay 1 --handler orders --database sqlite:app.db
//! ```

use oncely::{AnyTx, Envelope, Error, Handled, Handler};
use std::process::ExitCode;

/// The consumer's handler: one order row per message (`orders` must exist).
#[derive(Clone)]
struct Orders;

impl Handler<AnyTx> for Orders {
    async fn handle(&self, tx: &mut AnyTx, msg: &Envelope) -> Result<Handled, Error> {
        let amount: i64 = std::str::from_utf8(msg.payload())
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::permanent("payload is not an amount"))?;
        let sql = "INSERT INTO orders (id, amount) VALUES ($1, $2)";
        tx.execute(sql, &[msg.id().as_str().into(), amount.into()])
            .await?;
        Ok(Handled::Applied)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    oncely::cli::Admin::new()
        .handler("orders", Orders)
        .run()
        .await
}
