//! PostgreSQL: an optional time-partitioned inbox, where pruning drops whole daily partitions
//! instead of deleting rows (no row-by-row WAL, no dead tuples, no vacuum debt).
//!
//! The layout is a separate table shape for the same name: [`install`] creates
//! `{schema}.{prefix}inbox` as a table partitioned by `received_at` (one partition per UTC day,
//! created ahead, plus a default partition), with a guard trigger that keeps
//! `(consumer, message_id)` unique across partitions. Install it *before* the store's
//! `migrate()` on a fresh schema or prefix (`oncely migrate --with partitioned` applies both), then point the store's `Tables` at it; the store's
//! claim statement works unchanged. See `docs/retention.md` for the design and its limits
//! (READ COMMITTED only; retention is rounded up to whole days).
//!
//! Existing inboxes are not converted in place: start the partitioned layout under a new
//! schema/prefix and let the old table age out (prune it as usual), or copy it in a quiet window.

use crate::db::{Ops, doing};
use crate::time::{DAY_MS, day_digits, day_of_digits};
use oncely_core::{Error, Result};
use oncely_sql::clock::now_ms;
use oncely_sql::migrate::{Adopt, Migration};
use oncely_sql::{AnyStore, Column, Dialect, MigrationSet, SqlTx, Tables};
use tracing::{info, warn};

/// The SQL template (with `{schema}` and `{prefix}`) of the partitioned inbox.
pub const PARTITIONED_INBOX_SQL: &str =
    include_str!("../migrations/postgres/partitioned_inbox.sql");

/// The partitioned-inbox DDL for these tables, for users who run their own migration tool.
pub fn partitioned_inbox_sql(tables: &Tables) -> String {
    let all = [
        PARTITIONED_INBOX_SQL,
        PARTITIONED_CLAIM_SQL,
        PARTITIONED_KEY_SQL,
        PARTITIONED_SEALED_SQL,
        PARTITIONED_CLAIM_FN_SQL,
        PARTITIONED_TIME_KEY_SQL,
    ];
    all.map(|sql| tables.render(sql)).join("\n")
}

/// The SQL template of the partitioned inbox's second migration: the guard trigger skips the
/// ids a batch claim locked and checked itself (see `oncely_sql::batch`).
pub const PARTITIONED_CLAIM_SQL: &str =
    include_str!("../migrations/postgres/partitioned_claim.sql");

/// The SQL template of the partitioned inbox's third migration: the claim-key index the batch
/// claim probes the partitions by (see `oncely_sql::batch`).
pub const PARTITIONED_KEY_SQL: &str = include_str!("../migrations/postgres/partitioned_key.sql");

/// The SQL template of the partitioned inbox's fourth migration: the sealed days' claim keys
/// a batch claim probes instead of every day's partition ([`seal`] builds them).
pub const PARTITIONED_SEALED_SQL: &str =
    include_str!("../migrations/postgres/partitioned_sealed.sql");

/// The SQL template of the partitioned inbox's fifth migration: the group-claim function
/// oncely-sql's batch claim calls, one call per chunk (see `oncely_sql::batch`).
pub const PARTITIONED_CLAIM_FN_SQL: &str =
    include_str!("../migrations/postgres/partitioned_claim_fn.sql");

/// The SQL template of the partitioned inbox's sixth migration: the primary key led by
/// `received_at`, so that a claim writes one random index page (the claim key's), not two.
pub const PARTITIONED_TIME_KEY_SQL: &str =
    include_str!("../migrations/postgres/partitioned_time_key.sql");

/// The `partitioned` migration set (PostgreSQL only) of oncely-sql's one registry: the static
/// part of the layout (partitioned table, default partition, guard trigger). It must run
/// before the `inbox` set, whose `CREATE TABLE IF NOT EXISTS` then leaves the table alone. The
/// daily partitions depend on the date and are created by [`install`] / [`ensure`], not here.
/// A partitioned inbox installed before the shared ledger is adopted.
pub static MIGRATIONS: MigrationSet = MigrationSet::new("partitioned")
    .postgres(&[
        Migration::new(1, "partitioned_inbox", PARTITIONED_INBOX_SQL),
        Migration::new(2, "partitioned_claim", PARTITIONED_CLAIM_SQL),
        Migration::new(3, "partitioned_key", PARTITIONED_KEY_SQL),
        Migration::new(4, "partitioned_sealed", PARTITIONED_SEALED_SQL),
        Migration::new(5, "partitioned_claim_fn", PARTITIONED_CLAIM_FN_SQL),
        Migration::new(6, "partitioned_time_key", PARTITIONED_TIME_KEY_SQL),
    ])
    .adopt(&[Adopt::Probe {
        dialect: Dialect::Postgres,
        sql: "SELECT COUNT(*) FROM pg_partitioned_table WHERE partrelid = to_regclass('{schema}{prefix}inbox')",
        through: 1,
    }]);

/// One daily partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Partition {
    /// Qualified table name.
    pub name: String,
    /// First `received_at` (unix ms) it holds.
    pub from_ms: i64,
    /// First `received_at` it no longer holds.
    pub to_ms: i64,
}

/// Fails unless the database has the partitioned inbox ([`Dialect::has_partitions`]).
fn partitions(ops: &Ops) -> Result<()> {
    if ops.dialect().has_partitions() {
        return Ok(());
    }
    Err(Error::config(
        "the partitioned inbox exists on PostgreSQL only; other databases prune in batches",
    ))
}

/// The partition holding day number `day` (days since 1970-01-01, UTC): `inbox_pYYYYMMDD`.
fn suffix(day: i64) -> Result<String> {
    let digits = day_digits(day)
        .ok_or_else(|| Error::config(format!("day {day} is outside the years -9999..=9999")))?;
    Ok(format!("inbox_p{digits}"))
}

/// The day number a partition's name (under `prefix`) stands for.
fn day_of_suffix(name: &str, prefix: &str) -> Option<i64> {
    day_of_digits(name.strip_prefix(prefix)?.strip_prefix("inbox_p")?)
}

/// True when the inbox of `ops` is the partitioned layout.
pub async fn is_partitioned(ops: &Ops) -> Result<bool> {
    if !ops.dialect().has_partitions() {
        return Ok(false);
    }
    let sql = "SELECT COUNT(*) FROM pg_partitioned_table WHERE partrelid = to_regclass($1)";
    let n = ops
        .autocommit()
        .fetch_i64(sql, &[ops.tables().inbox().into()])
        .await;
    Ok(n.map_err(doing("checking the inbox layout"))?.unwrap_or(0) > 0)
}

/// Creates the partitioned inbox (and partitions from today to `days_ahead` days ahead).
/// Run it before the store's `migrate()`. A no-op (apart from creating partitions) when the
/// partitioned inbox exists; an error when a regular inbox exists under these names.
pub async fn install(ops: &Ops, days_ahead: u32) -> Result<Vec<String>> {
    partitions(ops)?;
    if let Some(create) = ops
        .tables()
        .schema()
        .and_then(|schema| ops.dialect().create_schema_sql(schema))
    {
        let done = ops.autocommit().script(&create).await;
        done.map_err(doing("creating the schema"))?;
    }
    check_installable(ops).await?;
    // Under the migration lock; records (or adopts) the set in the ledger.
    let store = AnyStore::with_tables(ops.pool().clone(), ops.tables().clone());
    if store.migrate_with(&[&MIGRATIONS]).await? > 0 {
        info!(table = %ops.tables().inbox(), "partitioned inbox installed");
    }
    ensure(ops, now_ms(), days_ahead).await
}

/// Fails with a configuration error that says what to do when a regular (unpartitioned)
/// inbox already exists under these names: the partitioned layout replaces the inbox table
/// and cannot be created over it. `Ok` when there is no inbox yet or it is partitioned.
pub async fn check_installable(ops: &Ops) -> Result<()> {
    partitions(ops)?;
    if is_partitioned(ops).await? {
        return Ok(());
    }
    let sql = "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass($1)";
    let n = ops
        .autocommit()
        .fetch_i64(sql, &[ops.tables().inbox().into()])
        .await;
    if n.map_err(doing("looking for the inbox"))?.unwrap_or(0) > 0 {
        return Err(Error::config(format!(
            "{} already exists as a regular table; the partitioned inbox replaces it and cannot \
             be created over it: install it under a new schema or prefix and switch consumers \
             over (docs/retention.md)",
            ops.tables().inbox()
        )));
    }
    Ok(())
}

/// Creates the missing daily partitions from the day of `from_ms` to `days_ahead` days after
/// today. Rows that fell into the default partition for such a day are moved into it.
/// Returns the partitions created.
pub async fn ensure(ops: &Ops, from_ms: i64, days_ahead: u32) -> Result<Vec<String>> {
    partitions(ops)?;
    let existing: Vec<String> = list(ops).await?.into_iter().map(|p| p.name).collect();
    let inbox = ops.tables().inbox();
    let default = ops.tables().inbox_default();
    let mut created = Vec::new();
    let last = now_ms().div_euclid(DAY_MS) + i64::from(days_ahead);
    let stray_sql = format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM {default} WHERE received_at >= $1 AND received_at < $2 LIMIT 1) AS stray"
    );
    let (today, sealing) = (
        crate::sealed::db_today_ms(ops).await?,
        crate::sealed::installed(ops).await?,
    );
    for day in from_ms.div_euclid(DAY_MS)..=last {
        let name = ops.tables().table(&suffix(day)?);
        if existing.contains(&name) {
            continue;
        }
        let (lo, hi) = (day * DAY_MS, (day + 1) * DAY_MS);
        let stray = ops
            .autocommit()
            .fetch_i64(&stray_sql, &[lo.into(), hi.into()])
            .await;
        let stray = stray
            .map_err(doing("checking the default partition"))?
            .unwrap_or(0)
            > 0;
        let sql = if stray {
            warn!(partition = %name, "moving rows out of the default partition");
            format!(
                "CREATE TABLE {name} (LIKE {inbox} INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
                 WITH moved AS (DELETE FROM {default} WHERE received_at >= {lo} AND received_at < {hi} RETURNING *)
                 INSERT INTO {name} SELECT * FROM moved;
                 ALTER TABLE {inbox} ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi});"
            )
        } else {
            format!(
                "CREATE TABLE IF NOT EXISTS {name} PARTITION OF {inbox} FOR VALUES FROM ({lo}) TO ({hi})"
            )
        };
        // A day already over, not in the sealed days' keys: claims probe every partition
        // again until the next seal covers it ([`crate::sealed`]).
        let sealed = if sealing && hi <= today {
            format!("; {}", crate::sealed::unpublish_sql(ops))
        } else {
            String::new()
        };
        let mut tx = ops.begin().await?;
        tx.script(&format!("SET LOCAL lock_timeout = '5s'; {sql}{sealed}"))
            .await
            .map_err(doing(&format!("creating partition {name}")))?;
        tx.commit().await?;
        created.push(name);
    }
    Ok(created)
}

/// The daily partitions, oldest first (the default partition is not listed).
pub async fn list(ops: &Ops) -> Result<Vec<Partition>> {
    partitions(ops)?;
    let sql = "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = to_regclass($1)";
    let rows = ops
        .autocommit()
        .fetch(sql, &[ops.tables().inbox().into()], &[Column::Text])
        .await;
    let names: Vec<String> = rows
        .map_err(doing("listing partitions"))?
        .iter()
        .map(|r| r[0].text())
        .collect();
    let prefix = ops.tables().prefix();
    let mut parts: Vec<Partition> = names
        .iter()
        .filter_map(|n| {
            let day = day_of_suffix(n, prefix)?;
            Some(Partition {
                name: ops.tables().table(&n[prefix.len()..]),
                from_ms: day * DAY_MS,
                to_ms: (day + 1) * DAY_MS,
            })
        })
        .collect();
    parts.sort_by_key(|p| p.from_ms);
    Ok(parts)
}

/// Drops the partitions whose every row is older than `cutoff_ms`. Each drop waits at most
/// 5 s for its lock (a long transaction on the inbox makes it skip, not queue everyone behind
/// it); skipped partitions are dropped on the next run. Returns the partitions dropped.
pub async fn drop_expired(ops: &Ops, cutoff_ms: i64) -> Result<Vec<String>> {
    partitions(ops)?;
    let mut dropped = Vec::new();
    for p in list(ops).await? {
        if p.to_ms > cutoff_ms {
            break;
        }
        let mut tx = ops.begin().await?;
        let result = tx
            .script(&format!(
                "SET LOCAL lock_timeout = '5s'; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE; DROP TABLE IF EXISTS {}",
                ops.tables().inbox(),
                p.name
            ))
            .await;
        match result {
            Ok(()) => {
                tx.commit().await?;
                dropped.push(p.name);
            }
            Err(e) => {
                warn!(partition = %p.name, error = %e, "could not drop partition now; will retry next run");
                // Rolled back; the error that made the drop wait too long is reported above.
                let _ = tx.rollback().await;
            }
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every claim key the layout's SQL computes uses oncely-sql's seed: the index it builds,
    /// the keys its function and guard trigger lock and probe by, and the key oncely-sql's
    /// payload-hash read names ([`oncely_sql::claim_key_sql`]) must be one expression, or the
    /// read stops finding the index and scans every partition.
    #[test]
    fn every_claim_key_of_the_layout_has_oncely_sqls_seed() {
        let sql = partitioned_inbox_sql(&Tables::default());
        let key = oncely_sql::claim_key_sql("consumer", "message_id");
        let seed = &key[key.rfind(", ").expect("a seed argument")..];
        let mut keys = 0;
        for (start, _) in sql.match_indices("hashtextextended(") {
            let mut depth = 0;
            let end = start
                + sql[start..]
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += i32::from(c == '(') - i32::from(c == ')');
                        c == ')' && depth == 0
                    })
                    .expect("a closed call")
                    .0;
            let call = &sql[start..=end];
            assert!(call.ends_with(seed), "{call} does not end with {seed}");
            keys += 1;
        }
        assert!(keys >= 9, "{keys} claim keys found");
    }

    #[test]
    fn partition_names_round_trip() {
        assert_eq!(suffix(0).unwrap(), "inbox_p19700101");
        assert_eq!(suffix(20_422).unwrap(), "inbox_p20251130");
        assert!(suffix(i64::MAX / DAY_MS).is_err());
        for day in [-1000, 0, 59, 60, 365, 11_016, 20_422, 30_000] {
            assert_eq!(
                day_of_suffix(&format!("x_{}", suffix(day).unwrap()), "x_"),
                Some(day)
            );
        }
        assert_eq!(day_of_suffix("x_inbox_default", "x_"), None);
        assert_eq!(day_of_suffix("y_inbox_p20251130", "x_"), None);
    }
}
