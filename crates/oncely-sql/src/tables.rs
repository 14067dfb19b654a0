//! Where oncely's tables live: an optional schema and a table-name prefix, validated as
//! plain identifiers so that configuration can never inject SQL.

use oncely_core::Error;

/// Table naming: `{schema}.{prefix}inbox`, `{schema}.{prefix}dead_letters`, …
///
/// ```
/// use oncely_sql::Tables;
/// let t = Tables::default().with_schema("billing").unwrap();
/// assert_eq!(t.inbox(), "billing.oncely_inbox");
/// assert!(Tables::default().with_prefix("x; DROP TABLE users; --").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    schema: Option<String>,
    prefix: String,
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            schema: None,
            prefix: "oncely_".to_owned(),
        }
    }
}

/// True for `[A-Za-z_][A-Za-z0-9_]*`, at most 48 bytes (so suffixed names stay under 63).
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 48
}

impl Tables {
    /// Puts the tables in `schema` (PostgreSQL schema, MySQL database; not for SQLite).
    pub fn with_schema(mut self, schema: &str) -> Result<Self, Error> {
        if !is_identifier(schema) {
            return Err(Error::config(format!(
                "schema name {schema:?} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 bytes)"
            )));
        }
        self.schema = Some(schema.to_owned());
        Ok(self)
    }

    /// Sets the table-name prefix (default `oncely_`).
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, Error> {
        if !prefix.is_empty() && !is_identifier(prefix) {
            return Err(Error::config(format!(
                "table prefix {prefix:?} is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 bytes)"
            )));
        }
        self.prefix = prefix.to_owned();
        Ok(self)
    }

    /// The schema, if any.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The qualified name of table `name` under this schema and prefix: the one naming rule
    /// for every table. oncely-sql's own tables have an accessor each ([`inbox`](Self::inbox),
    /// [`dead_letters`](Self::dead_letters), …); the crates above name theirs through this
    /// (`oncely_effects::EffectTables`, `oncely_ops::events::table`, the SQL queue's `queue`),
    /// and so do your own tables, a daily partition (`inbox_20250101`), an older ledger being
    /// adopted.
    ///
    /// ```
    /// let t = oncely_sql::Tables::default();
    /// assert_eq!(t.table("accounts"), "oncely_accounts");
    /// ```
    pub fn table(&self, name: &str) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}{name}", self.prefix),
            None => format!("{}{name}", self.prefix),
        }
    }

    /// The qualified name of the inbox: one row per `(consumer, message_id)` claimed (set `inbox`).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.inbox(), "app_inbox");
    /// ```
    pub fn inbox(&self) -> String {
        self.table("inbox")
    }

    /// The qualified name of the default partition of the PostgreSQL partitioned inbox (set `partitioned`).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.inbox_default(), "app_inbox_default");
    /// ```
    pub fn inbox_default(&self) -> String {
        self.table("inbox_default")
    }

    /// The qualified name of the PostgreSQL partitioned inbox's group-claim function (set
    /// `partitioned`, migration 5), which oncely-sql's batch claim calls.
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.inbox_claim(), "app_inbox_claim");
    /// ```
    pub fn inbox_claim(&self) -> String {
        self.table("inbox_claim")
    }

    /// The qualified name of the state row of the PostgreSQL partitioned inbox's sealed days:
    /// which of the two key tables claims probe, and below which `received_at` (set
    /// `partitioned`, migration 4; oncely-ops `sealed`).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.inbox_sealed_state(), "app_inbox_sealed_state");
    /// ```
    pub fn inbox_sealed_state(&self) -> String {
        self.table("inbox_sealed_state")
    }

    /// The qualified name of key table `slot` (`"a"` or `"b"`, as the state row names it) of the
    /// PostgreSQL partitioned inbox's sealed days (set `partitioned`, migration 4).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.inbox_sealed_keys("b"), "app_inbox_sealed_b");
    /// ```
    pub fn inbox_sealed_keys(&self, slot: &str) -> String {
        self.table(&format!("inbox_sealed_{slot}"))
    }

    /// The qualified name of the dead letters (set `inbox`).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.dead_letters(), "app_dead_letters");
    /// ```
    pub fn dead_letters(&self) -> String {
        self.table("dead_letters")
    }

    /// The qualified name of the one migration ledger, keyed by `(set_name, version)`.
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.migration_ledger(), "app_migration_ledger");
    /// ```
    pub fn migration_ledger(&self) -> String {
        self.table("migration_ledger")
    }

    /// The qualified name of the leases behind [`DbLock`](crate::DbLock) on SQLite and in
    /// portable mode ([`SqlStore::portable`](crate::SqlStore::portable()); also the migration
    /// lock there).
    ///
    /// ```
    /// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
    /// assert_eq!(t.ops_leases(), "app_ops_leases");
    /// ```
    pub fn ops_leases(&self) -> String {
        self.table("ops_leases")
    }

    /// Fills `{schema}` and `{prefix}` in a migration template.
    pub fn render(&self, template: &str) -> String {
        let schema = self
            .schema
            .as_ref()
            .map(|s| format!("{s}."))
            .unwrap_or_default();
        template
            .replace("{schema}", &schema)
            .replace("{prefix}", &self.prefix)
    }
}
