//! `dlq list | show ID | replay ID|--all [--handler NAME] [--force] | resolve ID --keep-stored | purge --older-than D`.

use super::{Admin, DbArgs, ReplayJob, cut, print_json, print_table, when};
use crate::dlq::{self, DeadLetterJson, Filter};
use crate::replay::{self, Decision, ReplayOptions};
use crate::retention::DEFAULT_WINDOW;
use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use oncely_core::StoredDeadLetter;
use oncely_sql::clock::to_ms;

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
    /// (`refused_old`, unless --force). Runs the handler registered under --handler (see
    /// docs/operations.md, "Your own admin binary").
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
        /// The registered handler to run (may be left out when only one is registered; the
        /// `oncely` binary registers `credits`, the demo's ledger in --schema).
        #[arg(long)]
        handler: Option<String>,
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

/// The list columns of a row: id, consumer, message id, then `rest`.
fn cells(id: i64, consumer: &str, message_id: Option<&str>, rest: Vec<String>) -> Vec<String> {
    let mut row = vec![
        id.to_string(),
        consumer.to_owned(),
        cut(message_id.unwrap_or("(none)"), 40),
    ];
    row.extend(rest);
    row
}

/// Prints dead letters as JSON.
fn print_rows_json(rows: &[StoredDeadLetter]) {
    print_json(&rows.iter().map(DeadLetterJson::from).collect::<Vec<_>>());
}

/// Runs `dlq`.
pub(crate) async fn run(admin: &Admin, args: DlqArgs) -> Result<bool> {
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
                print_rows_json(&rows);
            } else {
                let table: Vec<Vec<String>> = rows
                    .iter()
                    .map(|d| {
                        let rest = vec![
                            d.reason.clone(),
                            d.attempts.to_string(),
                            when(Some(to_ms(d.dead_lettered_at))),
                            cut(&d.detail, 60),
                        ];
                        cells(d.id, &d.consumer, d.message_id.as_deref(), rest)
                    })
                    .collect();
                let headers = [
                    "id",
                    "consumer",
                    "message id",
                    "reason",
                    "attempts",
                    "at",
                    "detail",
                ];
                print_table(&headers, &table);
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
                print_json(&DeadLetterJson::from(&row));
            } else {
                let j = DeadLetterJson::from(&row);
                let fields = vec![
                    vec!["id".into(), j.id.to_string()],
                    vec!["consumer".into(), j.consumer],
                    vec![
                        "message id".into(),
                        j.message_id.unwrap_or_else(|| "(none)".into()),
                    ],
                    vec![
                        "raw id (hex)".into(),
                        j.raw_id_hex.unwrap_or_else(|| "-".into()),
                    ],
                    vec!["reason".into(), j.reason],
                    vec!["detail".into(), j.detail],
                    vec!["attempts".into(), j.attempts.to_string()],
                    vec!["dead-lettered at".into(), when(Some(j.dead_lettered_at))],
                    vec![
                        "last seen".into(),
                        format!("{} ({} time(s))", when(Some(j.last_seen)), j.deliveries),
                    ],
                    vec!["payload sha256".into(), j.payload_hash],
                    vec![
                        "inbox holds sha256".into(),
                        j.stored_hash.unwrap_or_else(|| "-".into()),
                    ],
                    vec![
                        "entity / version".into(),
                        format!(
                            "{} / {}",
                            j.entity_key.as_deref().unwrap_or("-"),
                            j.version
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "-".into())
                        ),
                    ],
                    vec!["source time".into(), when(j.source_time)],
                    vec!["headers".into(), j.headers],
                    vec![
                        "payload".into(),
                        format!("{} bytes: {}", j.payload_len, cut(&j.payload_text, 400)),
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
            let replayer = admin.replayer(handler.as_deref())?;
            if id.is_none() && !all {
                bail!("give a dead-letter id or --all");
            }
            let options = ReplayOptions {
                window: retention.unwrap_or(DEFAULT_WINDOW),
                force,
            };
            let (store, ops) = db.open().await?;
            let filter = filter(&f);
            let bar = if db.json || id.is_some() {
                ProgressBar::hidden()
            } else {
                ProgressBar::new(dlq::ids(&ops, &filter).await?.len() as u64)
            };
            bar.set_style(
                ProgressStyle::with_template("{spinner} replaying [{bar:40}] {pos}/{len}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            let job = ReplayJob {
                ops: &ops,
                store: &store,
                id,
                filter: &filter,
                options: &options,
                progress: &mut |_| bar.inc(1),
            };
            let results = replayer.replay(job).await?;
            bar.finish_and_clear();
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
                        let row = if r.row_deleted { "deleted" } else { "kept" };
                        let rest = vec![
                            r.outcome.clone(),
                            row.into(),
                            cut(r.detail.as_deref().unwrap_or(""), 60),
                        ];
                        cells(r.id, &r.consumer, r.message_id.as_deref(), rest)
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
