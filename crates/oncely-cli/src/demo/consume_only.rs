//! `oncely demo --consume-only`: consume from a broker into the store until idle, then
//! report what the database holds, for producers written in other languages.

use super::{DemoArgs, consume_with, create_tables};
use anyhow::{Context, Result};
use oncely::brokers::connect_source;
use oncely_core::{ConsumerName, Inspect, StopWhenIdle};
use oncely_sql::AnyStore;
use oncely_testkit::credits::CreditTables;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What the database holds after consuming.
#[derive(Debug, Serialize)]
pub struct Holdings {
    /// Deliveries received in this run.
    pub deliveries: u64,
    /// Applied in this run.
    pub applied: u64,
    /// Duplicates skipped in this run.
    pub duplicates_skipped: u64,
    /// Ledger rows in the database.
    pub ledger_rows: u64,
    /// Distinct message ids in the ledger.
    pub distinct_ids: u64,
    /// Ledger rows beyond one per id.
    pub double_effects: u64,
    /// Sum of all balances.
    pub total_credits: i64,
    /// Balance per account.
    pub balances: BTreeMap<String, i64>,
    /// Dead-letter rows by reason.
    pub dead_letters_by_reason: BTreeMap<String, u64>,
}

/// Consumes until idle and prints the holdings; true when no id has two effects.
pub async fn run(args: &DemoArgs, store: &AnyStore, tables: &CreditTables) -> Result<bool> {
    create_tables(store, tables).await?;
    let name = ConsumerName::new("demo")?;
    let url = args
        .source
        .as_deref()
        .context("--consume-only needs --source")?;
    let source = connect_source(&super::broker::consume_url(url, args), name.as_str()).await?;
    let idle = StopWhenIdle::new(source, Duration::from_secs(args.idle_exit));
    let handler = oncely_testkit::credits::Credits::new(tables.clone());
    let (stats, _crashes) = consume_with(args, store, handler, &name, idle, 0).await?;
    let (ledger, balances) = tables
        .read_back(store)
        .await
        .context("reading the demo tables")?;
    let letters = store.dead_letters(Some(&name)).await?;
    let mut per_id: HashMap<&str, u64> = HashMap::new();
    for (id, _) in &ledger {
        *per_id.entry(id).or_default() += 1;
    }
    let mut reasons = BTreeMap::new();
    for l in &letters {
        *reasons.entry(l.reason.clone()).or_default() += 1;
    }
    let holdings = Holdings {
        deliveries: stats.received,
        applied: stats.applied,
        duplicates_skipped: stats.duplicates,
        ledger_rows: ledger.len() as u64,
        distinct_ids: per_id.len() as u64,
        double_effects: per_id.values().map(|n| n - 1).sum(),
        total_credits: balances.iter().map(|(_, b)| b).sum(),
        balances: balances.into_iter().collect(),
        dead_letters_by_reason: reasons,
    };
    if args.json {
        println!("{}", serde_json::to_string(&holdings)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&holdings)?);
    }
    Ok(holdings.double_effects == 0)
}
