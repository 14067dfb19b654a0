//! `oncely stats`: per-consumer numbers.

use super::{DbArgs, bytes, print_json, print_table, when};
use anyhow::Result;

/// Flags of `oncely stats`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    db: DbArgs,
}

/// Runs `oncely stats`.
pub(crate) async fn run(args: StatsArgs) -> Result<bool> {
    let (_store, ops) = args.db.open().await?;
    let stats = oncely_ops::stats::stats(&ops).await?;
    if args.db.json {
        print_json(&stats);
        return Ok(true);
    }
    let rows: Vec<Vec<String>> = stats
        .consumers
        .iter()
        .map(|c| {
            let others: Vec<String> = c
                .dead_letters_by_reason
                .iter()
                .map(|(r, n)| format!("{r}={n}"))
                .collect();
            vec![
                c.consumer.clone(),
                c.ids_held.to_string(),
                when(c.oldest_ms),
                when(c.newest_ms),
                c.conflicts.to_string(),
                c.late.to_string(),
                c.dead_letters.to_string(),
                others.join(" "),
            ]
        })
        .collect();
    print_table(
        &[
            "consumer",
            "ids held",
            "oldest",
            "newest",
            "conflicts",
            "late",
            "dead letters",
            "by reason",
        ],
        &rows,
    );
    println!();
    let layout = if stats.partitioned {
        format!("partitioned, {} daily partitions", stats.partitions)
    } else {
        "regular table".to_owned()
    };
    println!(
        "inbox {} ({layout}): {} ids, {}",
        stats.inbox,
        stats.ids_held,
        bytes(stats.inbox_bytes)
    );
    println!(
        "dead letters: {} rows, {}",
        stats.dead_letters,
        bytes(stats.dead_letter_bytes)
    );
    println!(
        "duplicates are not stored in the database: see oncely_deliveries_total{{outcome=\"duplicate\"}} (--metrics-addr)"
    );
    Ok(true)
}
