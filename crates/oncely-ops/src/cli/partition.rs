//! `oncely partition`: the PostgreSQL time-partitioned inbox.

use super::{DbArgs, print_json, print_table, when};
use crate::partition;
use anyhow::Result;

/// What to do.
#[derive(Debug, Clone, clap::ValueEnum)]
pub enum Action {
    /// Create the partitioned inbox (before `oncely migrate`) and its partitions.
    Install,
    /// Create the partitions for today and the days ahead.
    Ensure,
    /// List the daily partitions.
    List,
    /// Print the DDL instead of applying it.
    Sql,
}

/// Flags of `oncely partition`.
#[derive(Debug, Clone, clap::Args)]
pub struct PartitionArgs {
    /// install | ensure | list | sql
    action: Action,
    #[command(flatten)]
    db: DbArgs,
    /// Daily partitions to create ahead of today.
    #[arg(long, default_value_t = 3)]
    days_ahead: u32,
}

/// Runs `oncely partition`.
pub(crate) async fn run(args: PartitionArgs) -> Result<bool> {
    if let Action::Sql = args.action {
        let tables = super::tables(args.db.schema.as_deref(), &args.db.prefix)?;
        print!("{}", partition::partitioned_inbox_sql(&tables));
        return Ok(true);
    }
    let (store, ops) = args.db.open().await?;
    match args.action {
        Action::Install => {
            let created = partition::install(&ops, args.days_ahead).await?;
            store.migrate().await?;
            if args.db.json {
                print_json(&created);
            } else {
                println!(
                    "partitioned inbox {} ready; created {}",
                    ops.tables().inbox(),
                    created.join(", ")
                );
            }
        }
        Action::Ensure => {
            let created =
                partition::ensure(&ops, oncely_sql::clock::now_ms(), args.days_ahead).await?;
            if args.db.json {
                print_json(&created);
            } else {
                println!(
                    "created {} partition(s) {}",
                    created.len(),
                    created.join(", ")
                );
            }
        }
        Action::List | Action::Sql => {
            let parts = partition::list(&ops).await?;
            if args.db.json {
                print_json(&parts);
            } else {
                let rows: Vec<Vec<String>> = parts
                    .iter()
                    .map(|p| vec![p.name.clone(), when(Some(p.from_ms)), when(Some(p.to_ms))])
                    .collect();
                print_table(&["partition", "from", "to"], &rows);
            }
        }
    }
    Ok(true)
}
