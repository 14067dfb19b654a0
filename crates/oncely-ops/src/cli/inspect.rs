//! `oncely inspect MESSAGE_ID`: where one message id is.

use super::{DbArgs, cut, print_json, print_section, when};
use anyhow::Result;
use oncely_sql::clock::to_ms;

/// Flags of `oncely inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// The message id.
    message_id: String,
    #[command(flatten)]
    db: DbArgs,
}

/// Runs `oncely inspect`. Exit status 1 when the id is nowhere.
pub(crate) async fn run(args: InspectArgs) -> Result<bool> {
    let (_store, ops) = args.db.open().await?;
    let found = crate::inspect::inspect(&ops, &args.message_id).await?;
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
        print_section(
            "inbox (processed)",
            Some(&found.claimed),
            "",
            &["consumer", "processed at", "payload sha256"],
            |c| {
                vec![
                    c.consumer.clone(),
                    when(Some(c.received_at)),
                    c.payload_hash.clone(),
                ]
            },
        );
    }
    print_section(
        "dead letters",
        Some(&found.dead_letters),
        "",
        &["id", "consumer", "reason", "at", "detail"],
        |d| {
            vec![
                d.id.to_string(),
                d.consumer.clone(),
                d.reason.clone(),
                when(Some(to_ms(d.dead_lettered_at))),
                cut(&d.detail, 80),
            ]
        },
    );
    print_section(
        "effect journal",
        found.effect_journal.as_deref(),
        "no table",
        &["effect key", "kind", "state", "updated"],
        |j| {
            vec![
                j.effect_key.clone(),
                j.kind.clone(),
                j.state.clone(),
                when(Some(j.updated_at)),
            ]
        },
    );
    print_section(
        "outbox",
        found.outbox.as_deref(),
        "no table",
        &["id", "destination", "written", "dispatched"],
        |o| {
            vec![
                o.id.to_string(),
                o.destination.clone(),
                when(Some(o.created_at)),
                when(o.dispatched_at),
            ]
        },
    );
    Ok(anywhere)
}
