//! The names of oncely-effects' tables, under the store's schema and prefix
//! ([`Tables::table`], the one naming rule).

use oncely_sql::Tables;

/// The qualified names of oncely-effects' tables (migration set `effects`).
///
/// ```
/// use oncely_effects::EffectTables;
/// let t = oncely_sql::Tables::default().with_prefix("app_").unwrap();
/// assert_eq!(t.outbox(), "app_outbox");
/// assert_eq!(t.effect_journal(), "app_effect_journal");
/// assert_eq!(t.versions(), "app_versions");
/// ```
pub trait EffectTables {
    /// The transactional outbox ([`crate::Outbox`], [`crate::Relay`]).
    fn outbox(&self) -> String;
    /// The effect journal ([`crate::Journal`]).
    fn effect_journal(&self) -> String;
    /// The entity versions of versioned apply ([`crate::Versions`]).
    fn versions(&self) -> String;
}

impl EffectTables for Tables {
    fn outbox(&self) -> String {
        self.table("outbox")
    }

    fn effect_journal(&self) -> String {
        self.table("effect_journal")
    }

    fn versions(&self) -> String {
        self.table("versions")
    }
}
