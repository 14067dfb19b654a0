//! The store conformance suite on Redis, and the commit step's guards: a stale read, a
//! claim taken since it was read, a key outside the store's slot, a write that would fail.
//! Each test uses its own hash tag in database 13, so parallel runs do not collide.

use oncely_core::{Claim, ConsumerName, ErrorKind, Inspect, MessageId, PayloadHash, Result, Store};
use oncely_redis::{RedisStore, RedisTx};
use oncely_testkit::{StoreHarness, services};

const URL: &str = "redis://127.0.0.1:6379/13";

async fn fresh_store() -> Result<RedisStore> {
    RedisStore::connect(&format!(
        "{URL}?tag={}",
        oncely_testkit::services::unique("redis")
    ))
    .await
}

struct RedisHarness;

impl StoreHarness for RedisHarness {
    type Store = RedisStore;

    async fn fresh(&self) -> Result<RedisStore> {
        fresh_store().await
    }

    async fn add_effect(tx: &mut RedisTx, message_id: &str, amount: i64) -> Result<()> {
        let key = tx.key("effects");
        tx.rpush(&key, format!("{amount} {message_id}"))
    }

    async fn effects(store: &RedisStore) -> Result<Vec<(String, i64)>> {
        let rows: Vec<String> = redis::cmd("LRANGE")
            .arg(store.key("effects"))
            .arg(0)
            .arg(-1)
            .query_async(&mut store.connection())
            .await
            .map_err(|e| oncely_core::Error::transient(e.to_string()))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (amount, id) = r.split_once(' ')?;
                Some((id.to_owned(), amount.parse().ok()?))
            })
            .collect())
    }
}

async fn up(test: &str) -> bool {
    services::available(test, "Redis", "127.0.0.1:6379").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance() {
    if !up("conformance").await {
        return;
    }
    oncely_testkit::exercise(&RedisHarness).await;
}

fn ids(id: &str, payload: &[u8]) -> (ConsumerName, MessageId, PayloadHash) {
    (
        ConsumerName::new("billing").expect("name"),
        MessageId::new(id).expect("id"),
        PayloadHash::of(payload),
    )
}

#[tokio::test]
async fn a_stale_read_fails_the_commit_and_writes_nothing() {
    if !up("stale_read").await {
        return;
    }
    let store = fresh_store().await.expect("store");
    let balance = store.key("balance:a");
    let (c, id, hash) = ids("m-1", b"5");
    let mut tx = store.begin().await.expect("begin");
    assert_eq!(
        store.claim(&mut tx, &c, &id, hash).await.expect("claim"),
        Claim::Fresh
    );
    let seen = tx.get_i64(&balance).await.expect("read");
    tx.set(&balance, seen + 5).expect("write");
    // Another writer changes the balance after the read.
    let mut other = store.begin().await.expect("begin");
    other.incr_by(&balance, 100).expect("write");
    store.commit(other).await.expect("the other commit");
    let e = store
        .commit(tx)
        .await
        .expect_err("a commit over a stale read");
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert_eq!(
        store.claimed_hash(&c, "m-1").await.expect("read"),
        None,
        "claim written"
    );
    let mut conn = store.connection();
    let now: i64 = redis::cmd("GET")
        .arg(&balance)
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(now, 100, "the stale write was applied");
    // The retry reads the new value and commits.
    let mut tx = store.begin().await.expect("begin");
    assert_eq!(
        store.claim(&mut tx, &c, &id, hash).await.expect("claim"),
        Claim::Fresh
    );
    let seen = tx.get_i64(&balance).await.expect("read");
    tx.set(&balance, seen + 5).expect("write");
    store.commit(tx).await.expect("commit");
    let now: i64 = redis::cmd("GET")
        .arg(&balance)
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(now, 105);
    assert_eq!(
        store.claimed_hash(&c, "m-1").await.expect("read"),
        Some(hash)
    );
}

#[tokio::test]
async fn a_claim_taken_since_it_was_read_fails_the_commit() {
    if !up("claim_taken").await {
        return;
    }
    let store = fresh_store().await.expect("store");
    let counter = store.key("counter");
    let (c, id, hash) = ids("m-1", b"5");
    let mut first = store.begin().await.expect("begin");
    let mut second = store.begin().await.expect("begin");
    for tx in [&mut first, &mut second] {
        assert_eq!(
            store.claim(tx, &c, &id, hash).await.expect("claim"),
            Claim::Fresh
        );
        tx.incr_by(&counter, 5).expect("write");
    }
    store.commit(first).await.expect("first commit");
    let e = store.commit(second).await.expect_err("second commit");
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    let mut conn = store.connection();
    let now: i64 = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(now, 5, "applied twice");
    let ttl: i64 = redis::cmd("TTL")
        .arg(store.key("inbox:7:billing:m-1"))
        .query_async(&mut conn)
        .await
        .expect("ttl");
    let retention = oncely_core::DEFAULT_RETENTION.as_secs() as i64;
    assert!(ttl > retention - 60 && ttl <= retention, "claim TTL {ttl}");
}

#[tokio::test]
async fn keys_outside_the_slot_and_failing_writes_are_refused() {
    if !up("refusals").await {
        return;
    }
    let store = fresh_store().await.expect("store");
    let mut tx = store.begin().await.expect("begin");
    let e = tx
        .incr_by("balance:a", 1)
        .expect_err("a key without the tag");
    assert_eq!(e.kind(), ErrorKind::Permanent);
    assert!(e.to_string().contains("slot"), "{e}");
    let e = tx
        .write("FLUSHDB", &store.key("x"), Vec::<String>::new())
        .expect_err("not a write command");
    assert_eq!(e.kind(), ErrorKind::Permanent);

    // A write whose key holds the wrong type: nothing of the step is applied.
    let hash_key = store.key("a-hash");
    let mut conn = store.connection();
    let _: () = redis::cmd("HSET")
        .arg(&hash_key)
        .arg("f")
        .arg("1")
        .query_async(&mut conn)
        .await
        .expect("hset");
    let (c, id, hash) = ids("m-1", b"5");
    let mut tx = store.begin().await.expect("begin");
    store.claim(&mut tx, &c, &id, hash).await.expect("claim");
    tx.incr_by(&store.key("counter"), 1).expect("write");
    tx.incr_by(&hash_key, 1).expect("write");
    let e = store.commit(tx).await.expect_err("INCRBY on a hash");
    assert_eq!(e.kind(), ErrorKind::Permanent, "{e}");
    let counter: Option<i64> = redis::cmd("GET")
        .arg(store.key("counter"))
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(counter, None, "a write before the failing one was applied");
    assert_eq!(store.claimed_hash(&c, "m-1").await.expect("read"), None);
}

/// With group commit several messages for one key share a transaction: each read must see
/// the writes buffered before it, or the second read-modify-write overwrites the first.
#[tokio::test]
async fn reads_see_the_transactions_own_writes() {
    if !up("own_writes").await {
        return;
    }
    let store = fresh_store().await.expect("store");
    let balance = store.key("balance:a");
    let hash = store.key("h");
    let mut tx = store.begin().await.expect("begin");
    for add in [5, 7] {
        let now = tx.get_i64(&balance).await.expect("read");
        tx.set(&balance, now + add).expect("write");
    }
    tx.incr_by(&balance, 100).expect("write");
    assert_eq!(tx.get_i64(&balance).await.expect("read"), 112);
    tx.hincr_by(&hash, "f", 3).expect("write");
    tx.write("HSET", &hash, ("g", "x")).expect("write");
    assert_eq!(
        tx.hget(&hash, "f").await.expect("read"),
        Some(b"3".to_vec())
    );
    assert_eq!(
        tx.hget(&hash, "g").await.expect("read"),
        Some(b"x".to_vec())
    );
    let list = store.key("list");
    tx.rpush(&list, "v").expect("write");
    let e = tx.get(&list).await.expect_err("a list read back");
    assert_eq!(e.kind(), ErrorKind::Permanent);
    store.commit(tx).await.expect("commit");
    let mut conn = store.connection();
    let now: i64 = redis::cmd("GET")
        .arg(&balance)
        .query_async(&mut conn)
        .await
        .expect("get");
    assert_eq!(now, 112);
}
