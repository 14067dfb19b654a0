//! The admin commands: `prune`, `partition`, `stats`, `inspect`, `dlq`, and the Prometheus
//! endpoint (`--metrics-addr`). The work is done by the `oncely-ops` library.

pub mod dlq;
pub mod inspect;
pub mod metrics;
pub mod partition;
pub mod prune;
pub mod stats;

use anyhow::Result;
use oncely_ops::Ops;
use oncely_ops::partition::format_utc_ms;
use oncely_sql::AnyStore;
use oncely_sql::ConnectOptions;

/// Where the oncely tables are, and how to print.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// Database URL (sqlite:…, postgres://…, mysql://…).
    #[arg(long, env = "ONCELY_DATABASE_URL")]
    pub database: String,
    /// Schema (PostgreSQL) or database (MySQL) of the tables.
    #[arg(long)]
    pub schema: Option<String>,
    /// Table-name prefix.
    #[arg(long, default_value = "oncely_")]
    pub prefix: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl DbArgs {
    /// Opens the store (no migration) and the operations over it.
    pub async fn open(&self) -> Result<(AnyStore, Ops)> {
        let options = ConnectOptions {
            tables: crate::tables(self.schema.as_deref(), &self.prefix)?,
            max_connections: 4,
            ..ConnectOptions::default()
        };
        let store = AnyStore::connect(&self.database, &options).await?;
        let ops = Ops::from(&store);
        Ok((store, ops))
    }
}

/// clap value parser for durations such as `7d`, `36h`, `1h30m` (see
/// [`oncely_ops::retention::parse_duration`]).
pub fn duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    oncely_ops::retention::parse_duration(text).map_err(|e| e.to_string())
}

/// Prints `value` as one line of JSON.
pub fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string(value).expect("serializable output")
    );
}

/// Prints rows as an aligned text table.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_uppercase()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// A unix-ms time for humans, or `-`.
pub fn when(ms: Option<i64>) -> String {
    ms.map(format_utc_ms).unwrap_or_else(|| "-".to_owned())
}

/// Bytes for humans, or `-`.
pub fn bytes(n: Option<i64>) -> String {
    match n {
        None => "-".to_owned(),
        Some(b) if b < 1024 => format!("{b} B"),
        Some(b) if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        Some(b) => format!("{:.1} MiB", b as f64 / 1_048_576.0),
    }
}

/// Cuts `text` to `max` characters for a table cell.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}
