//! Multi-row statements: the raw SQL reference for batches (claims and effects written by
//! hand) and the effect half that oncely's batch handler shares with it. `unnest` arrays on
//! PostgreSQL, multi-row `VALUES` on SQLite, one transaction per batch.

use crate::bed::{Credit, Item, Sql, db_err};
use oncely_sql::clock::now_ms;
use oncely_sql::sqlx::{self, AssertSqlSafe, MySql, Postgres, Sqlite, Transaction};
use std::collections::{BTreeMap, HashSet};

/// Balance increments per account, summed and sorted (sorted so concurrent batches lock
/// accounts in one order).
fn sums<'a>(rows: &[(&str, &'a Credit)]) -> BTreeMap<&'a str, i64> {
    let mut sums = BTreeMap::new();
    for (_, credit) in rows {
        *sums.entry(credit.account.as_str()).or_insert(0) += credit.amount;
    }
    sums
}

/// The raw reference on PostgreSQL: claims `items` with one `unnest` insert, then writes the
/// fresh ones' ledger rows and balances with one statement each.
pub(crate) async fn pg_batch(
    sql: &Sql,
    tx: &mut Transaction<'static, Postgres>,
    consumer: &str,
    items: &[Item],
) -> oncely_core::Result<()> {
    let ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    let hashes: Vec<&str> = items.iter().map(|i| i.hash.as_str()).collect();
    let fresh: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "INSERT INTO {} (consumer, message_id, payload_hash, received_at) \
         SELECT $1, m, h, $4 FROM unnest($2::text[], $3::text[]) AS t(m, h) \
         ON CONFLICT DO NOTHING RETURNING message_id",
        sql.inbox
    )))
    .bind(consumer)
    .bind(ids)
    .bind(hashes)
    .bind(now_ms())
    .fetch_all(&mut **tx)
    .await
    .map_err(db_err)?;
    let fresh: HashSet<&str> = fresh.iter().map(String::as_str).collect();
    let rows: Vec<(&str, &Credit)> = items
        .iter()
        .filter(|i| fresh.contains(i.id.as_str()))
        .map(|i| (i.id.as_str(), &i.credit))
        .collect();
    pg_effects(sql, tx, &rows).await
}

/// Ledger rows and balances of `rows` on PostgreSQL: two `unnest` statements.
pub(crate) async fn pg_effects(
    sql: &Sql,
    tx: &mut Transaction<'static, Postgres>,
    rows: &[(&str, &Credit)],
) -> oncely_core::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {} (message_id, account, amount) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::int8[])",
        sql.ledger
    )))
    .bind(rows.iter().map(|r| r.0).collect::<Vec<_>>())
    .bind(
        rows.iter()
            .map(|r| r.1.account.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(rows.iter().map(|r| r.1.amount).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    let sums = sums(rows);
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {a} (account, balance) SELECT * FROM unnest($1::text[], $2::int8[]) \
         ON CONFLICT (account) DO UPDATE SET balance = {a}.balance + excluded.balance",
        a = sql.accounts
    )))
    .bind(sums.keys().copied().collect::<Vec<_>>())
    .bind(sums.values().copied().collect::<Vec<_>>())
    .execute(&mut **tx)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Rows per multi-row statement on SQLite (4 parameters a row stays far below its limit).
const SQLITE_CHUNK: usize = 100;

fn values(count: usize, width: usize) -> String {
    (0..count)
        .map(|r| {
            let cols: Vec<String> = (0..width)
                .map(|c| format!("?{}", 1 + r * width + c))
                .collect();
            format!("({})", cols.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The raw reference on SQLite: multi-row claims with `RETURNING`, then the effects.
pub(crate) async fn sqlite_batch(
    sql: &Sql,
    tx: &mut Transaction<'static, Sqlite>,
    consumer: &str,
    items: &[Item],
) -> oncely_core::Result<()> {
    let now = now_ms();
    let mut rows: Vec<(&str, &Credit)> = Vec::with_capacity(items.len());
    for chunk in items.chunks(SQLITE_CHUNK) {
        let values: Vec<String> = (0..chunk.len())
            .map(|r| format!("(?1, ?{}, ?{}, ?2)", 3 + 2 * r, 4 + 2 * r))
            .collect();
        let text = format!(
            "INSERT INTO {} (consumer, message_id, payload_hash, received_at) VALUES {} \
             ON CONFLICT DO NOTHING RETURNING message_id",
            sql.inbox,
            values.join(", ")
        );
        let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(text))
            .bind(consumer)
            .bind(now);
        for item in chunk {
            q = q.bind(item.id.as_str()).bind(item.hash.as_str());
        }
        let fresh: HashSet<String> = q
            .fetch_all(&mut **tx)
            .await
            .map_err(db_err)?
            .into_iter()
            .collect();
        rows.extend(
            chunk
                .iter()
                .filter(|i| fresh.contains(&i.id))
                .map(|i| (i.id.as_str(), &i.credit)),
        );
    }
    sqlite_effects(sql, tx, &rows).await
}

/// Ledger rows and balances of `rows` on SQLite: multi-row `VALUES` of up to 100 rows.
pub(crate) async fn sqlite_effects(
    sql: &Sql,
    tx: &mut Transaction<'static, Sqlite>,
    rows: &[(&str, &Credit)],
) -> oncely_core::Result<()> {
    for chunk in rows.chunks(SQLITE_CHUNK) {
        let text = format!(
            "INSERT INTO {} (message_id, account, amount) VALUES {}",
            sql.ledger,
            values(chunk.len(), 3)
        );
        let mut q = sqlx::query(AssertSqlSafe(text));
        for (id, credit) in chunk {
            q = q
                .bind(*id)
                .bind(credit.account.as_str())
                .bind(credit.amount);
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    let sums: Vec<(&str, i64)> = sums(rows).into_iter().collect();
    for chunk in sums.chunks(SQLITE_CHUNK) {
        let text = format!(
            "INSERT INTO {a} (account, balance) VALUES {} \
             ON CONFLICT (account) DO UPDATE SET balance = {a}.balance + excluded.balance",
            values(chunk.len(), 2),
            a = sql.accounts
        );
        let mut q = sqlx::query(AssertSqlSafe(text));
        for (account, amount) in chunk {
            q = q.bind(*account).bind(*amount);
        }
        q.execute(&mut **tx).await.map_err(db_err)?;
    }
    Ok(())
}

/// Multi-row effects on MariaDB / MySQL: not part of the benchmark (its cells there use the
/// per-message handler), so batch cells are not run on it.
pub(crate) async fn mysql_effects(
    _sql: &Sql,
    _tx: &mut Transaction<'static, MySql>,
    _rows: &[(&str, &Credit)],
) -> oncely_core::Result<()> {
    Err(oncely_core::Error::config(
        "batch effects are written for PostgreSQL and SQLite",
    ))
}
