//! `oncely stats`: per-consumer numbers.

use super::{DbArgs, bytes, print_json, print_table, when};
use anyhow::Result;

/// Flags of `oncely stats`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The retention window to project the inbox over (what `oncely prune --older-than`
    /// keeps), e.g. 7d, 72h.
    #[arg(long, default_value = "7d", value_parser = super::duration)]
    window: std::time::Duration,
}

/// `oncely stats --json`: the numbers and the projection.
#[derive(serde::Serialize)]
struct Json<'a> {
    #[serde(flatten)]
    stats: &'a crate::stats::InboxStats,
    projection: &'a crate::stats::Projection,
    /// The server settings worth changing for this inbox ([`crate::stats::advice`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    advice: Vec<String>,
}

/// Runs `oncely stats`.
pub(crate) async fn run(args: StatsArgs) -> Result<bool> {
    let (_store, ops) = args.db.open().await?;
    let stats = crate::stats::stats(&ops).await?;
    let projection = crate::stats::projection(&ops, &stats, args.window).await?;
    let advice = crate::stats::advice(&ops, &stats, &projection).await;
    if args.db.json {
        print_json(&Json {
            stats: &stats,
            projection: &projection,
            advice,
        });
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
    let per_id = projection
        .bytes_per_id
        .map_or("-".to_owned(), |b| format!("{b:.0} bytes per id"));
    println!(
        "at the last hour's {:.1} ids/s, a {} window holds {} ids, {} ({per_id})",
        projection.ids_per_sec,
        humanize_window(projection.window_ms),
        projection.ids,
        bytes(projection.bytes)
    );
    for advice in advice {
        println!("advice: {advice}");
    }
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

/// `7d`, `36h` or `90m` for a window in ms.
fn humanize_window(ms: i64) -> String {
    const HOUR: i64 = 3_600_000;
    if ms % (24 * HOUR) == 0 {
        format!("{}d", ms / (24 * HOUR))
    } else if ms % HOUR == 0 {
        format!("{}h", ms / HOUR)
    } else {
        format!("{}m", ms / 60_000)
    }
}
