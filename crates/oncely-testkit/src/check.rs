//! The independent checker: counts effect rows against what was published.

use std::collections::{BTreeMap, HashMap};

/// What a run did, counted from the ledger against the published messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Distinct ids expected to take effect.
    pub expected_ids: usize,
    /// Ledger rows beyond one per id.
    pub double_effects: usize,
    /// Expected ids with no ledger row (and not excused by a dead letter).
    pub lost: usize,
    /// Ledger rows whose id was never expected.
    pub unexpected: usize,
    /// Ids whose single row has the wrong amount.
    pub wrong_amount: usize,
}

impl Tally {
    /// True when the run had exactly one effect per expected id and nothing else.
    pub fn is_exactly_once(&self) -> bool {
        self.double_effects == 0 && self.lost == 0 && self.unexpected == 0 && self.wrong_amount == 0
    }
}

/// Compares ledger rows `(id, amount)` with the expected amount per id. Ids listed in
/// `excused` (e.g. dead-lettered) may have no row.
pub fn tally(
    effects: &[(String, i64)],
    expected: &HashMap<String, i64>,
    excused: &[String],
) -> Tally {
    let mut rows: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (id, amount) in effects {
        rows.entry(id.as_str()).or_default().push(*amount);
    }
    let mut t = Tally {
        expected_ids: expected.len(),
        ..Tally::default()
    };
    for (id, amounts) in &rows {
        match expected.get(*id) {
            None => t.unexpected += amounts.len(),
            Some(want) => {
                t.double_effects += amounts.len() - 1;
                if amounts[0] != *want {
                    t.wrong_amount += 1;
                }
            }
        }
    }
    t.lost = expected
        .keys()
        .filter(|id| !rows.contains_key(id.as_str()) && !excused.contains(id))
        .count();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_doubles_and_losses() {
        let expected: HashMap<String, i64> =
            [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)].into();
        let effects = vec![("a".into(), 1), ("a".into(), 1), ("b".into(), 9)];
        let t = tally(&effects, &expected, &[]);
        assert_eq!(t.double_effects, 1);
        assert_eq!(t.lost, 1);
        assert_eq!(t.wrong_amount, 1);
        assert!(!t.is_exactly_once());
        assert_eq!(tally(&effects, &expected, &["c".into()]).lost, 0);
    }
}
