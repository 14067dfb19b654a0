//! The credits effect in SQL tables: a ledger row per applied message and the account's
//! balance upserted, through [`AnyTx`] (one handler for SQLite, PostgreSQL and MySQL).

use super::Credit;
use oncely_core::{Envelope, Handled, Handler, RawEnvelope, Result};
use oncely_sql::{AnyStore, AnyTx, Column, Dialect, SqlTx, Value};
use std::collections::BTreeMap;

/// Rows per multi-row statement in a batch (3 placeholders a row: far below every
/// database's bind-parameter limit).
const ROWS_PER_STATEMENT: usize = 200;

/// Table names and statements for one dialect and schema.
#[derive(Debug, Clone)]
pub struct CreditTables {
    /// `accounts` table (account, balance).
    pub accounts: String,
    /// `ledger` table: one row per applied effect.
    pub ledger: String,
    insert_ledger: String,
    upsert_balance: String,
    /// `ON CONFLICT …` / `ON DUPLICATE KEY …` that adds to the balance.
    add_on_conflict: String,
    dialect: Dialect,
}

impl CreditTables {
    /// The tables `{prefix}accounts` and `{prefix}ledger` in `schema` (None: unqualified).
    pub fn new(dialect: Dialect, schema: Option<&str>, prefix: &str) -> Self {
        let q = |t: &str| match schema {
            Some(s) => format!("{s}.{prefix}{t}"),
            None => format!("{prefix}{t}"),
        };
        let accounts = q("accounts");
        let ledger = q("ledger");
        let add_on_conflict = dialect.on_conflict_add(&accounts, "account", "balance");
        let mut tables = Self {
            accounts,
            ledger,
            insert_ledger: String::new(),
            upsert_balance: String::new(),
            add_on_conflict,
            dialect,
        };
        tables.insert_ledger = tables.ledger_rows(1);
        tables.upsert_balance = tables.balance_rows(1);
        tables
    }

    /// `INSERT` of `rows` ledger rows: `($1, $2, $3), ($4, $5, $6), …`.
    fn ledger_rows(&self, rows: usize) -> String {
        format!(
            "INSERT INTO {} (message_id, account, amount) VALUES {}",
            self.ledger,
            placeholders(rows, 3)
        )
    }

    /// Upsert adding to `rows` balances: `($1, $2), ($3, $4), … ON CONFLICT …`.
    fn balance_rows(&self, rows: usize) -> String {
        format!(
            "INSERT INTO {} (account, balance) VALUES {} {}",
            self.accounts,
            placeholders(rows, 2),
            self.add_on_conflict
        )
    }

    /// Creates both tables if they do not exist ([`CreditTables::ddl`]), serialized where
    /// two concurrent `CREATE TABLE IF NOT EXISTS` of one table can collide (PostgreSQL's
    /// catalog) by a transaction-scoped lock.
    pub async fn create(&self, store: &AnyStore) -> Result<()> {
        let mut tx = store.pool().begin().await?;
        if let Some(lock) = self.dialect.ddl_lock_sql(4242) {
            tx.execute(&lock, &[]).await?;
        }
        for sql in self.ddl() {
            tx.script(&sql).await?;
        }
        tx.commit().await
    }

    /// What the tables hold, read back in one transaction on `store`'s pool: the
    /// ledger rows `(message id, amount)` and the balances `(account, balance)`.
    pub async fn read_back(
        &self,
        store: &AnyStore,
    ) -> Result<(Vec<(String, i64)>, Vec<(String, i64)>)> {
        let ledger_sql = format!("SELECT message_id, amount FROM {}", self.ledger);
        let balance_sql = format!("SELECT account, balance FROM {}", self.accounts);
        let cols = [Column::Text, Column::I64];
        let mut tx = store.pool().begin().await?;
        let ledger = tx.fetch(&ledger_sql, &[], &cols).await?;
        let balances = tx.fetch(&balance_sql, &[], &cols).await?;
        tx.commit().await?;
        let pairs =
            |rows: Vec<Vec<Value>>| rows.iter().map(|r| (r[0].text(), r[1].i64())).collect();
        Ok((pairs(ledger), pairs(balances)))
    }

    /// The database the statements are written for.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The sum of every account's balance (0 without accounts), read on `store`'s pool.
    pub async fn balance_total(&self, store: &AnyStore) -> Result<i64> {
        let sum = self.dialect.cast_i64("COALESCE(SUM(balance), 0)");
        let sql = format!("SELECT {sum} FROM {}", self.accounts);
        Ok(store.pool().fetch_i64(&sql, &[]).await?.unwrap_or(0))
    }

    /// Both tables' qualified names (what [`CreditTables::ddl`] creates).
    pub fn names(&self) -> [&str; 2] {
        [&self.accounts, &self.ledger]
    }

    /// DDL creating both tables.
    pub fn ddl(&self) -> Vec<String> {
        let (seq, text) = (self.dialect.serial_key(), self.dialect.key_text(255));
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {} (account {text} PRIMARY KEY, balance BIGINT NOT NULL)",
                self.accounts
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {} (seq {seq}, message_id {text} NOT NULL, account {text} NOT NULL, amount BIGINT NOT NULL)",
                self.ledger
            ),
        ]
    }
}

/// The credits handler: one ledger row per applied message (so the checker can count double
/// effects) and the account balance incremented.
#[derive(Clone)]
pub struct Credits {
    tables: CreditTables,
}

impl Credits {
    /// A handler writing to `tables`.
    pub fn new(tables: CreditTables) -> Self {
        Self { tables }
    }
}

/// One impl for every database: the statements number their placeholders `$1, $2, …`.
impl Handler<AnyTx> for Credits {
    async fn handle(&self, tx: &mut AnyTx, message: &Envelope) -> Result<Handled> {
        let credit = Credit::parse(message.payload())?;
        let (id, account, amount) = (message.id().as_str(), &credit.account, credit.amount);
        let args = [id.into(), account.into(), amount.into()];
        tx.execute(&self.tables.insert_ledger, &args).await?;
        tx.execute(&self.tables.upsert_balance, &args[1..]).await?;
        Ok(Handled::Applied)
    }

    /// A group commit's fresh messages with two statements per [`ROWS_PER_STATEMENT`] rows,
    /// not two per message: their ledger rows in one multi-row insert, their balances in one
    /// upsert with the amounts summed per account (one statement may not update a row twice),
    /// accounts in sorted order (so two transactions lock them in the same order). Each is
    /// split into parts of a power of two rows ([`power_of_two_parts`]), so that the
    /// statements take a few shapes, not one per group size. A payload
    /// that does not parse fails the batch: the runtime rolls it back and runs its messages
    /// one at a time through [`Handler::handle`], which dead-letters that one.
    async fn handle_batch(&self, tx: &mut AnyTx, messages: &[Envelope]) -> Result<Vec<Handled>> {
        let credits = messages
            .iter()
            .map(|m| Credit::parse(m.payload()))
            .collect::<Result<Vec<_>>>()?;
        let rows: Vec<(&Envelope, &Credit)> = messages.iter().zip(&credits).collect();
        for chunk in rows.chunks(ROWS_PER_STATEMENT).flat_map(power_of_two_parts) {
            let args: Vec<Value> = chunk
                .iter()
                .flat_map(|(m, c)| -> [Value; 3] {
                    [
                        m.id().as_str().into(),
                        c.account.as_str().into(),
                        c.amount.into(),
                    ]
                })
                .collect();
            tx.execute(&self.tables.ledger_rows(chunk.len()), &args)
                .await?;
        }
        let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
        for credit in &credits {
            *sums.entry(credit.account.as_str()).or_default() += credit.amount;
        }
        let sums: Vec<(&str, i64)> = sums.into_iter().collect();
        for chunk in sums.chunks(ROWS_PER_STATEMENT).flat_map(power_of_two_parts) {
            let args: Vec<Value> = chunk
                .iter()
                .flat_map(|(account, sum)| -> [Value; 2] { [(*account).into(), (*sum).into()] })
                .collect();
            tx.execute(&self.tables.balance_rows(chunk.len()), &args)
                .await?;
        }
        Ok(vec![Handled::Applied; messages.len()])
    }

    /// The account's row is what the effect locks: group commit's lanes go by account.
    fn lock_key(&self, message: &RawEnvelope) -> Option<String> {
        Credit::lock_key(&message.payload)
    }
}

/// `rows` tuples of `width` numbered placeholders: `placeholders(2, 2)` is `($1, $2), ($3, $4)`.
fn placeholders(rows: usize, width: usize) -> String {
    (0..rows)
        .map(|row| {
            let cols: Vec<String> = (1..=width)
                .map(|c| format!("${}", row * width + c))
                .collect();
            format!("({})", cols.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `rows` in consecutive parts whose lengths are powers of two, largest first (45 rows: 32, 8,
/// 4, 1). sqlx prepares and caches every statement (100 per connection); a multi-row statement
/// of every length from 1 to 64 overflows that cache, and on MySQL each eviction stalls the
/// next statement about 40 ms (oncely-sql's claims round their lists up for the same reason).
fn power_of_two_parts<T>(rows: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let len = 1 << rest.len().ilog2();
        let (part, tail) = rest.split_at(len);
        rest = tail;
        Some(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncely_core::{CancellationToken, Consumer, ConsumerName, Inspect, MemorySource};

    #[test]
    fn parts_are_powers_of_two_in_order() {
        let rows: Vec<u32> = (0..45).collect();
        let parts: Vec<&[u32]> = super::power_of_two_parts(&rows).collect();
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        assert_eq!(lens, [32, 8, 4, 1]);
        assert_eq!(parts.concat(), rows, "every row once, in order");
        assert_eq!(super::power_of_two_parts::<u32>(&[]).count(), 0);
    }

    /// The credits tables on a fresh, migrated SQLite file.
    async fn sqlite_store(dir: &tempfile::TempDir) -> (AnyStore, CreditTables) {
        let url = format!("sqlite:{}", dir.path().join("credits.db").display());
        let store = AnyStore::connect(&url).await.expect("store");
        store.migrate().await.expect("migrate");
        let tables = CreditTables::new(store.dialect(), None, "credit_");
        tables.create(&store).await.expect("tables");
        (store, tables)
    }

    /// Runs one group-committing consumer over `payloads` (ids `m-0`, `m-1`, …) and returns
    /// (ledger rows, distinct ids in the ledger, sum of balances, dead-lettered ids, batch stats).
    async fn consume(
        payloads: &[String],
    ) -> (i64, i64, i64, Vec<String>, oncely_core::GroupCommitStats) {
        let dir = tempfile::tempdir().expect("tmp");
        let (store, tables) = sqlite_store(&dir).await;
        let name = ConsumerName::new("credits").expect("name");
        let consumer = Consumer::new(name.clone(), store.clone(), Credits::new(tables.clone()))
            .concurrency(1)
            .group_commit(64);
        let source = MemorySource::new();
        for (i, payload) in payloads.iter().enumerate() {
            source.publish(RawEnvelope::new(format!("m-{i}"), payload.clone()));
        }
        source.close();
        consumer
            .run(source, CancellationToken::new())
            .await
            .expect("run");
        let mut tx = store.pool().begin().await.expect("begin");
        let rows_sql = format!("SELECT COUNT(*) FROM {}", tables.ledger);
        let rows = tx
            .fetch_i64(&rows_sql, &[])
            .await
            .expect("rows")
            .unwrap_or(0);
        let ids_sql = format!("SELECT COUNT(DISTINCT message_id) FROM {}", tables.ledger);
        let ids = tx.fetch_i64(&ids_sql, &[]).await.expect("ids").unwrap_or(0);
        let total_sql = format!("SELECT SUM(balance) FROM {}", tables.accounts);
        let total = tx
            .fetch_i64(&total_sql, &[])
            .await
            .expect("sum")
            .unwrap_or(0);
        drop(tx);
        let letters = store.dead_letters(Some(&name)).await.expect("letters");
        let dead = letters.into_iter().filter_map(|l| l.message_id).collect();
        (rows, ids, total, dead, consumer.group_commit_stats())
    }

    fn credit(account: usize, amount: i64) -> String {
        String::from_utf8(Credit::payload(&format!("acct-{account}"), amount)).expect("UTF-8")
    }

    #[tokio::test]
    async fn a_group_is_written_whole_with_repeated_accounts() {
        // 40 credits over 3 accounts: every statement of the group touches an account many times.
        let payloads: Vec<String> = (0..40).map(|i| credit(i % 3, 1 + i as i64)).collect();
        let (rows, ids, total, dead, stats) = consume(&payloads).await;
        assert_eq!((rows, ids), (40, 40), "one ledger row per message");
        assert_eq!(
            total,
            (1..=40).sum::<i64>(),
            "balances add up to the credits"
        );
        assert!(dead.is_empty(), "{dead:?}");
        assert!(stats.committed >= 1 && stats.fallbacks == 0, "{stats:?}");
    }

    #[tokio::test]
    async fn an_undecodable_payload_in_a_group_is_dead_lettered_and_the_rest_applied_once() {
        let mut payloads: Vec<String> = (0..30).map(|i| credit(i % 4, 10)).collect();
        payloads[17] = "not a credit".to_owned();
        let (rows, ids, total, dead, stats) = consume(&payloads).await;
        assert_eq!((rows, ids), (29, 29), "every other message applied once");
        assert_eq!(total, 29 * 10, "balances add up to the applied credits");
        assert_eq!(dead, vec!["m-17".to_owned()]);
        assert!(stats.fallbacks >= 1, "the group fell back: {stats:?}");
    }

    #[test]
    fn placeholders_number_rows_in_turn() {
        assert_eq!(placeholders(1, 3), "($1, $2, $3)");
        assert_eq!(placeholders(2, 2), "($1, $2), ($3, $4)");
    }
}
