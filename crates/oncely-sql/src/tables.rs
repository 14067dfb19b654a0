//! Where oncely's tables live: an optional schema and a table-name prefix, validated as
//! plain identifiers so that configuration can never inject SQL.

use oncely_core::Error;

/// Table naming: `{schema}.{prefix}inbox`, `{schema}.{prefix}dead_letters`, …
///
/// ```
/// use oncely_sql::Tables;
/// let t = Tables::default().with_schema("billing").unwrap();
/// assert_eq!(t.table("inbox"), "billing.oncely_inbox");
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
pub fn is_identifier(s: &str) -> bool {
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

    /// The qualified name of table `name` (e.g. `inbox`).
    pub fn table(&self, name: &str) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}{name}", self.prefix),
            None => format!("{}{name}", self.prefix),
        }
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
