//! `oncely dlq list | show ID | replay ID|--all [--force] | resolve ID --keep-stored | purge --older-than D`.

use super::{DbArgs, cut, print_json, print_table, when};
use crate::demo::credits::{CreditTables, Credits};
use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use oncely_ops::Ops;
use oncely_ops::dlq::{self, Filter};
use oncely_ops::replay::{self, Decision, ReplayOptions, Replayed};
use oncely_ops::retention::DEFAULT_WINDOW;
use oncely_sql::AnyStore;
use std::sync::Arc;

/// Flags of `oncely dlq`.
#[derive(Debug, Clone, clap::Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    action: DlqAction,
}

/// Filters shared by the subcommands.
#[derive(Debug, Clone, clap::Args)]
struct FilterArgs {
    /// Only this consumer's dead letters.
    #[arg(long)]
    consumer: Option<String>,
    /// Only this reason (conflict, permanent, late, bad_id, attempts_exhausted, panic).
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum DlqAction {
    /// List dead letters, oldest first.
    List {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many rows.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one dead letter with its payload and metadata.
    Show {
        /// Dead-letter row id.
        id: i64,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Re-run dead letters through their consumer (still deduplicated by the inbox), then
    /// delete the row. Refuses conflicts (see `resolve`), rows whose id the inbox already
    /// holds (resolved as `already_applied`) and rows whose claim may have been pruned
    /// (`refused_old`, unless --force). The CLI replays with the demo's credits handler.
    Replay {
        /// Dead-letter row id (or --all).
        id: Option<i64>,
        /// Every dead letter matching --consumer / --reason.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
        /// The handler to run: `credits` (the demo's ledger, in --schema).
        #[arg(long, default_value = "credits")]
        handler: String,
        /// The inbox retention window (what `oncely prune --older-than` keeps): older rows are
        /// refused, since their claim may have been pruned.
        #[arg(long, value_parser = super::duration)]
        retention: Option<std::time::Duration>,
        /// Replay rows refused as too old (possibly pruned claim) anyway; prints a warning per row.
        #[arg(long)]
        force: bool,
    },
    /// Decide a conflict row: `--keep-stored` keeps the effect the inbox recorded and drops
    /// this payload (the row is deleted, the decision recorded in {prefix}ops_events).
    /// `--apply-new` is refused: see docs/operations.md.
    Resolve {
        /// Dead-letter row id.
        id: i64,
        /// The stored effect stands; drop the new payload.
        #[arg(
            long,
            required_unless_present = "apply_new",
            conflicts_with = "apply_new"
        )]
        keep_stored: bool,
        /// Apply the new payload instead (refused: reverse the stored effect yourself and
        /// publish the new payload under a new id, then `--keep-stored`).
        #[arg(long)]
        apply_new: bool,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Delete dead letters stored longer ago than --older-than.
    Purge {
        /// Age, e.g. 30d, 12h.
        #[arg(long, value_parser = super::duration)]
        older_than: std::time::Duration,
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        filter: FilterArgs,
    },
}

fn filter(f: &FilterArgs) -> Filter {
    Filter {
        consumer: f.consumer.clone(),
        reason: f.reason.clone(),
        ..Filter::default()
    }
}

/// Runs `oncely dlq`.
pub async fn run(args: DlqArgs) -> Result<bool> {
    match args.action {
        DlqAction::List {
            db,
            filter: f,
            limit,
        } => {
            let (_store, ops) = db.open().await?;
            let rows = dlq::list(
                &ops,
                &Filter {
                    limit: Some(limit),
                    ..filter(&f)
                },
            )
            .await?;
            if db.json {
                print_json(&rows);
            } else {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|d| {
                        vec![
                            d.id.to_string(),
                            d.consumer.clone(),
                            cut(d.message_id.as_deref().unwrap_or("(none)"), 40),
                            d.reason.clone(),
                            d.attempts.to_string(),
                            when(Some(d.dead_lettered_at)),
                            cut(&d.detail, 60),
                        ]
                    })
                    .collect();
                print_table(
                    &[
                        "id",
                        "consumer",
                        "message id",
                        "reason",
                        "attempts",
                        "at",
                        "detail",
                    ],
                    &table,
                );
                println!("{} dead letter(s)", rows.len());
            }
            Ok(true)
        }
        DlqAction::Show { id, db } => {
            let (_store, ops) = db.open().await?;
            let Some(row) = dlq::show(&ops, id).await? else {
                bail!("no dead letter with id {id}");
            };
            if db.json {
                print_json(&row);
            } else {
                let s = &row.summary;
                let fields = vec![
                    vec!["id".into(), s.id.to_string()],
                    vec!["consumer".into(), s.consumer.clone()],
                    vec![
                        "message id".into(),
                        s.message_id.clone().unwrap_or_else(|| "(none)".into()),
                    ],
                    vec![
                        "raw id (hex)".into(),
                        row.raw_id_hex.clone().unwrap_or_else(|| "-".into()),
                    ],
                    vec!["reason".into(), s.reason.clone()],
                    vec!["detail".into(), s.detail.clone()],
                    vec!["attempts".into(), s.attempts.to_string()],
                    vec!["dead-lettered at".into(), when(Some(s.dead_lettered_at))],
                    vec!["payload sha256".into(), row.payload_hash.clone()],
                    vec![
                        "inbox holds sha256".into(),
                        row.stored_hash.clone().unwrap_or_else(|| "-".into()),
                    ],
                    vec![
                        "entity / version".into(),
                        format!(
                            "{} / {}",
                            row.entity_key.as_deref().unwrap_or("-"),
                            row.version
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "-".into())
                        ),
                    ],
                    vec!["source time".into(), when(row.source_time)],
                    vec!["headers".into(), row.headers.clone()],
                    vec![
                        "payload".into(),
                        format!("{} bytes: {}", row.payload_len, cut(&row.payload_text, 400)),
                    ],
                ];
                print_table(&["field", "value"], &fields);
            }
            Ok(true)
        }
        DlqAction::Replay {
            id,
            all,
            db,
            filter: f,
            handler,
            retention,
            force,
        } => {
            if handler != "credits" {
                bail!(
                    "unknown handler {handler:?}: the CLI can replay with `credits` (the demo's); use oncely_ops::dlq::replay with your own handler"
                );
            }
            if id.is_none() && !all {
                bail!("give a dead-letter id or --all");
            }
            let options = ReplayOptions {
                window: retention.unwrap_or(DEFAULT_WINDOW),
                force,
            };
            let (store, ops) = db.open().await?;
            let results = run_replay(&store, &ops, &db, id, &filter(&f), &options).await?;
            for r in &results {
                if let Some(w) = &r.warning {
                    eprintln!("warning: dead letter {}: {w}", r.id);
                }
            }
            let failed = results.iter().filter(|r| !r.row_deleted).count();
            if db.json {
                print_json(&results);
            } else {
                let table: Vec<Vec<String>> = results
                    .iter()
                    .map(|r| {
                        vec![
                            r.id.to_string(),
                            r.consumer.clone(),
                            cut(r.message_id.as_deref().unwrap_or("(none)"), 40),
                            r.outcome.clone(),
                            if r.row_deleted {
                                "deleted".into()
                            } else {
                                "kept".into()
                            },
                            cut(r.detail.as_deref().unwrap_or(""), 60),
                        ]
                    })
                    .collect();
                print_table(
                    &["id", "consumer", "message id", "outcome", "row", "detail"],
                    &table,
                );
                let mut by_outcome = std::collections::BTreeMap::new();
                for r in &results {
                    *by_outcome.entry(r.outcome.as_str()).or_insert(0) += 1;
                }
                let counts: Vec<String> =
                    by_outcome.iter().map(|(o, n)| format!("{n} {o}")).collect();
                println!(
                    "{} row(s): {}; {} row(s) kept",
                    results.len(),
                    counts.join(", "),
                    failed
                );
            }
            Ok(true)
        }
        DlqAction::Resolve {
            id,
            keep_stored: _,
            apply_new,
            db,
        } => {
            if apply_new {
                bail!(
                    "--apply-new is not offered: the inbox holds another payload's effect for this id, and \
                     applying the new one under the same id would need that effect reversed first, which \
                     oncely cannot check. Reverse it yourself, publish the new payload under a new message \
                     id, then `oncely dlq resolve {id} --keep-stored` (see docs/operations.md)"
                );
            }
            let (_store, ops) = db.open().await?;
            let r = replay::resolve(&ops, id, Decision::KeepStored).await?;
            if db.json {
                print_json(&r);
            } else {
                println!(
                    "dead letter {id} resolved: the stored effect stands, this payload is dropped (recorded)"
                );
            }
            Ok(true)
        }
        DlqAction::Purge {
            older_than,
            db,
            filter: f,
        } => {
            let (_store, ops) = db.open().await?;
            let bar = if db.json {
                ProgressBar::hidden()
            } else {
                ProgressBar::new_spinner()
            };
            let purged = dlq::purge(&ops, older_than, &filter(&f), &mut |n| {
                bar.set_message(format!("{n} purged"));
                bar.tick();
            })
            .await?;
            bar.finish_and_clear();
            if db.json {
                print_json(&serde_json::json!({ "purged": purged }));
            } else {
                println!("{purged} dead letter(s) purged");
            }
            Ok(true)
        }
    }
}

async fn run_replay(
    store: &AnyStore,
    ops: &Ops,
    db: &DbArgs,
    id: Option<i64>,
    filter: &Filter,
    options: &ReplayOptions,
) -> Result<Vec<Replayed>> {
    let tables = CreditTables::new(store.dialect(), db.schema.as_deref());
    let handler = Credits::new(tables);
    if let Some(id) = id {
        let r = replay::replay(ops, Arc::new(store.clone()), handler, id, options).await?;
        return Ok(vec![r]);
    }
    let total = dlq::list(ops, filter).await?.len() as u64;
    let bar = if db.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} replaying [{bar:40}] {pos}/{len}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let results = replay::replay_all(
        ops,
        Arc::new(store.clone()),
        handler,
        filter,
        options,
        &mut |_| bar.inc(1),
    )
    .await?;
    bar.finish_and_clear();
    Ok(results)
}
