//! `migrate`: apply or print the migration sets of oncely-sql's one registry: the
//! inbox and dead letters always, the others with `--with`.

use anyhow::{Context, Result};
use oncely_sql::migrate::print_migration_sets;
use oncely_sql::{AnyStore, ConnectOptions, Dialect, INBOX, MigrationSet, redact_url};

/// A migration set besides the inbox, for `--with`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum With {
    /// Entity versions, effect journal and outbox (oncely-effects).
    Effects,
    /// The transactional outbox: created by the effects set (same as `effects`).
    Outbox,
    /// The PostgreSQL queue table (oncely-sql-queue).
    Queue,
    /// The HTTP Idempotency-Key table (oncely-http).
    Http,
    /// The PostgreSQL time-partitioned inbox, applied before the inbox set (daily partitions:
    /// `oncely partition ensure`).
    Partitioned,
}

/// The sets to apply, in order: the partitioned inbox (it replaces the inbox table, so it
/// comes first), the inbox, then the others; each once.
fn sets(with: &[With]) -> Vec<&'static MigrationSet> {
    let mut sets = Vec::new();
    if with.contains(&With::Partitioned) {
        sets.push(&crate::partition::MIGRATIONS);
    }
    sets.push(&INBOX);
    if with.contains(&With::Effects) || with.contains(&With::Outbox) {
        sets.push(&oncely_effects::MIGRATIONS);
    }
    if with.contains(&With::Queue) {
        sets.push(&oncely_sql_queue::MIGRATIONS);
    }
    if with.contains(&With::Http) {
        sets.push(&oncely_http::MIGRATIONS);
    }
    sets
}

/// Flags of `migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Database URL (sqlite:…, postgres://…, mysql://…).
    #[arg(long, env = "ONCELY_DATABASE_URL")]
    database: String,
    /// Print the SQL instead of applying it.
    #[arg(long)]
    print: bool,
    /// Schema (PostgreSQL) or database (MySQL) for the tables.
    #[arg(long)]
    schema: Option<String>,
    /// Table-name prefix.
    #[arg(long, default_value = "oncely_")]
    prefix: String,
    /// Further migration sets, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    with: Vec<With>,
}

/// Applies (or prints, without connecting) the migrations.
pub(crate) async fn run(args: MigrateArgs) -> Result<()> {
    let tables = super::tables(args.schema.as_deref(), &args.prefix)?;
    let (url, print, with) = (args.database.as_str(), args.print, args.with.as_slice());
    let dialect = Dialect::from_url(url)?;
    let sets = sets(with);
    if print {
        print!("{}", print_migration_sets(dialect, &tables, &sets)?);
        return Ok(());
    }
    let options = ConnectOptions {
        tables,
        max_connections: 2,
        ..ConnectOptions::default()
    };
    let store = AnyStore::connect_with(url, &options).await?;
    if with.contains(&With::Partitioned) {
        // The partitioned layout replaces the inbox table: refuse clearly over a regular one.
        crate::partition::check_installable(&crate::Ops::from(&store)).await?;
    }
    let applied = store
        .migrate_with(&sets)
        .await
        .with_context(|| format!("migrating {}", redact_url(url)))?;
    store.pool().close().await;
    println!(
        "{applied} migration(s) applied ({} up to date)",
        dialect.name()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_ordered_and_unique() {
        let names = |w: &[With]| sets(w).iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(&[]), ["inbox"]);
        assert_eq!(
            names(&[
                With::Http,
                With::Queue,
                With::Outbox,
                With::Effects,
                With::Partitioned
            ]),
            ["partitioned", "inbox", "effects", "queue", "http"]
        );
    }
}
