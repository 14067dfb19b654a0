//! SQLite: concurrent duplicates with two pools on one file (`BEGIN IMMEDIATE` makes the
//! second transaction wait for the first one's write lock).

mod common;

use common::{sqlite, suite};

#[tokio::test]
async fn sqlite_claims_fresh_duplicate_conflict() {
    let Some(fx) = sqlite("lite_claims").await else {
        return;
    };
    suite::claims(fx).await;
}

#[tokio::test]
async fn sqlite_concurrent_duplicate_waits_then_duplicate() {
    let Some(fx) = sqlite("lite_conc_dup").await else {
        return;
    };
    suite::concurrent_duplicate(fx, false).await;
}

#[tokio::test]
async fn sqlite_concurrent_duplicate_after_rollback_applies() {
    let Some(fx) = sqlite("lite_conc_rb").await else {
        return;
    };
    suite::concurrent_duplicate(fx, true).await;
}
