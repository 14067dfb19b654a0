//! `oncely migrate`: apply or print the migrations.

use anyhow::Result;
use oncely_sql::AnyStore;
use oncely_sql::{ConnectOptions, Dialect, Tables, print_migrations};

/// Applies (or prints, without connecting) the migrations for `url`.
pub async fn run(url: &str, tables: Tables, print: bool) -> Result<()> {
    if print {
        print!("{}", print_migrations(Dialect::from_url(url)?, &tables));
        return Ok(());
    }
    let options = ConnectOptions {
        tables,
        max_connections: 2,
        ..ConnectOptions::default()
    };
    let store = AnyStore::connect(url, &options).await?;
    let applied = store.migrate().await?;
    println!(
        "{applied} migration(s) applied ({} up to date)",
        store.dialect().name()
    );
    Ok(())
}
