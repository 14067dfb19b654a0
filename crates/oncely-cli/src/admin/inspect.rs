//! `oncely inspect MESSAGE_ID`: where one message id is.

use super::{DbArgs, cut, print_json, print_table, when};
use anyhow::Result;

/// Flags of `oncely inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// The message id.
    message_id: String,
    #[command(flatten)]
    db: DbArgs,
}

/// Runs `oncely inspect`. Exit status 1 when the id is nowhere.
pub async fn run(args: InspectArgs) -> Result<bool> {
    let (_store, ops) = args.db.open().await?;
    let found = oncely_ops::inspect::inspect(&ops, &args.message_id).await?;
    let anywhere = !found.claimed.is_empty()
        || !found.dead_letters.is_empty()
        || found.effect_journal.as_ref().is_some_and(|j| !j.is_empty())
        || found.outbox.as_ref().is_some_and(|o| !o.is_empty());
    if args.db.json {
        print_json(&found);
        return Ok(anywhere);
    }
    println!("message {}", found.message_id);
    if found.claimed.is_empty() {
        println!("\ninbox: not processed by any consumer (or pruned)");
    } else {
        println!("\ninbox (processed):");
        let rows: Vec<Vec<String>> = found
            .claimed
            .iter()
            .map(|c| {
                vec![
                    c.consumer.clone(),
                    when(Some(c.received_at)),
                    c.payload_hash.clone(),
                ]
            })
            .collect();
        print_table(&["consumer", "processed at", "payload sha256"], &rows);
    }
    if found.dead_letters.is_empty() {
        println!("\ndead letters: none");
    } else {
        println!("\ndead letters:");
        let rows: Vec<Vec<String>> = found
            .dead_letters
            .iter()
            .map(|d| {
                vec![
                    d.id.to_string(),
                    d.consumer.clone(),
                    d.reason.clone(),
                    when(Some(d.dead_lettered_at)),
                    cut(&d.detail, 80),
                ]
            })
            .collect();
        print_table(&["id", "consumer", "reason", "at", "detail"], &rows);
    }
    match &found.effect_journal {
        None => println!("\neffect journal: no table"),
        Some(rows) if rows.is_empty() => println!("\neffect journal: no rows"),
        Some(rows) => {
            println!("\neffect journal:");
            let rows: Vec<Vec<String>> = rows
                .iter()
                .map(|j| {
                    vec![
                        j.effect_key.clone(),
                        j.kind.clone(),
                        j.state.clone(),
                        when(Some(j.updated_at)),
                    ]
                })
                .collect();
            print_table(&["effect key", "kind", "state", "updated"], &rows);
        }
    }
    match &found.outbox {
        None => println!("\noutbox: no table"),
        Some(rows) if rows.is_empty() => println!("\noutbox: no rows"),
        Some(rows) => {
            println!("\noutbox:");
            let rows: Vec<Vec<String>> = rows
                .iter()
                .map(|o| {
                    vec![
                        o.id.to_string(),
                        o.destination.clone(),
                        when(Some(o.created_at)),
                        when(o.dispatched_at),
                    ]
                })
                .collect();
            print_table(&["id", "destination", "written", "dispatched"], &rows);
        }
    }
    Ok(anywhere)
}
