//! What only the SQL stores have, on SQLite, PostgreSQL and MariaDB: migration 0002 folds the
//! repeated dead letters of an existing table, and a claim's `received_at` comes from the
//! database clock. (The worst dead letters and the repeats of one dead letter are cases of the
//! testkit's store suite: `worst_dead_letters_are_stored`, `repeated_dead_letter_is_one_row`.)

mod common;

use common::dead_letter_suite as suite;
use common::{HarnessStore, TestStore, db_clock, mysql, pg, sqlite, text};
use oncely_core::{Claim, ConsumerName, MessageId, PayloadHash, Store};
use oncely_sql::sqlx;

macro_rules! upgrade_tests {
    ($($setup:ident => $upgrade:ident;)*) => {$(
        #[tokio::test]
        async fn $upgrade() {
            let Some(fx) = $setup(stringify!($upgrade)).await else { return };
            suite::upgrade_folds_repeats(fx).await;
        }
    )*};
}

upgrade_tests! {
    sqlite => sqlite_upgrade_folds_repeated_dead_letters;
    pg => pg_upgrade_folds_repeated_dead_letters;
    mysql => mysql_upgrade_folds_repeated_dead_letters;
}

/// MariaDB lets a session set its clock (`SET timestamp`): the claims then carry that time,
/// which shows `received_at` is the database's clock, not the consumer host's.
#[tokio::test]
async fn mysql_received_at_is_the_database_clock() {
    let Some(fx) = mysql("my_db_clock").await else {
        return;
    };
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let h = PayloadHash::of(b"p");
    let mut tx = s.begin().await.unwrap();
    sqlx::raw_sql("SET timestamp = 1000000000.123")
        .execute(&mut *tx)
        .await
        .unwrap();
    let one = MessageId::new("one").unwrap();
    assert_eq!(s.claim(&mut tx, &c, &one, h).await.unwrap(), Claim::Fresh);
    let batch: Vec<_> = ["b1", "b2"]
        .iter()
        .map(|id| (MessageId::new(*id).unwrap(), h))
        .collect();
    s.claim_batch(&mut tx, &c, &batch).await.unwrap();
    sqlx::raw_sql("SET timestamp = DEFAULT")
        .execute(&mut *tx)
        .await
        .unwrap();
    s.commit(tx).await.unwrap();
    let rows = s
        .rows(format!(
            "SELECT CAST(message_id AS CHAR), CAST(received_at AS CHAR), 'x' FROM {} ORDER BY message_id",
            fx.tables().inbox()
        ))
        .await
        .unwrap();
    let got: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("b1", "1000000000123"),
            ("b2", "1000000000123"),
            ("one", "1000000000123")
        ]
    );
}

fn ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// On every store the claim's `received_at` is "now" by the database's clock expression.
async fn received_at_is_now<S: TestStore>(fx: common::Fx<S>) {
    let s = &fx.store;
    let c = ConsumerName::new("c").unwrap();
    let h = PayloadHash::of(b"p");
    let before = ms(db_clock(s).await.unwrap());
    let mut tx = s.begin().await.unwrap();
    let one = MessageId::new("one").unwrap();
    assert_eq!(s.claim(&mut tx, &c, &one, h).await.unwrap(), Claim::Fresh);
    let batch = [(MessageId::new("b1").unwrap(), h)];
    s.claim_batch(&mut tx, &c, &batch).await.unwrap();
    s.commit(tx).await.unwrap();
    let after = ms(db_clock(s).await.unwrap());
    let t = text(S::DIALECT);
    let rows = s
        .rows(format!(
            "SELECT CAST(message_id AS {t}), CAST(received_at AS {t}), 'x' FROM {}",
            fx.tables().inbox()
        ))
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for (id, at, _) in rows {
        let at: i64 = at.parse().unwrap();
        assert!(
            (before - 5..=after + 5).contains(&at),
            "{id}: {at} not in {before}..{after}"
        );
    }
}

#[tokio::test]
async fn sqlite_received_at_is_now() {
    let Some(fx) = sqlite("lite_received_at").await else {
        return;
    };
    received_at_is_now(fx).await;
}

#[tokio::test]
async fn pg_received_at_is_now() {
    let Some(fx) = pg("pg_received_at").await else {
        return;
    };
    received_at_is_now(fx).await;
}

#[tokio::test]
async fn mysql_received_at_is_now() {
    let Some(fx) = mysql("my_received_at").await else {
        return;
    };
    received_at_is_now(fx).await;
}
