//! The Redis store's start-up checks and the ack's wait, on redis-server processes this test
//! starts itself (own port, own directory; the machine's shared server is never
//! reconfigured): an evicting server is refused, `durability=aof` needs
//! `appendfsync always`, `durability=replicas:N` waits for N replicas or holds the delivery.

use oncely_core::{ConsumerName, ErrorKind, MessageId, PayloadHash, Store};
use oncely_redis::RedisStore;
use oncely_testkit::redis_server::RedisServer;
use std::time::Duration;

/// Starts `redis-server` with `args`, or `None` (SKIPPED banner; a failure under CI) when
/// the binary is missing.
async fn server(test: &str, args: &[&str]) -> Option<RedisServer> {
    match RedisServer::start(args).await {
        Ok(s) => Some(s),
        Err(e) if RedisServer::is_missing(&e) => {
            oncely_testkit::services::unavailable(test, "redis-server binary", &e);
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

fn url(s: &RedisServer, options: &str) -> String {
    format!("{}?{options}", s.url(0))
}

async fn commit_one(store: &RedisStore, id: &str) -> oncely_core::Result<()> {
    let mut tx = store.begin().await?;
    let (c, id) = (
        ConsumerName::new("c").expect("name"),
        MessageId::new(id).expect("id"),
    );
    store.claim(&mut tx, &c, &id, PayloadHash::of(b"1")).await?;
    let key = tx.key("n");
    tx.incr_by(&key, 1)?;
    store.commit(tx).await
}

#[tokio::test]
async fn evicting_servers_are_refused() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let Some(s) = server(
            "evicting_servers_are_refused",
            &["--maxmemory-policy", policy],
        )
        .await
        else {
            return;
        };
        let e = RedisStore::connect(&url(&s, ""))
            .await
            .expect_err("an evicting server");
        assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        assert!(e.to_string().contains(policy), "{e}");
    }
}

#[tokio::test]
async fn aof_durability_needs_appendfsync_always() {
    let Some(s) = server(
        "aof_durability",
        &["--appendonly", "yes", "--appendfsync", "everysec"],
    )
    .await
    else {
        return;
    };
    let e = RedisStore::connect(&url(&s, "durability=aof"))
        .await
        .expect_err("everysec is not enough");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("appendfsync everysec"), "{e}");
    // durability=memory accepts it (and warns what it can lose).
    RedisStore::connect(&url(&s, "durability=memory"))
        .await
        .expect("memory durability");

    let Some(s) = server(
        "aof_durability",
        &["--appendonly", "yes", "--appendfsync", "always"],
    )
    .await
    else {
        return;
    };
    let store = RedisStore::connect(&url(&s, "durability=aof"))
        .await
        .expect("aof durability");
    commit_one(&store, "m-1").await.expect("commit");
}

#[tokio::test]
async fn replica_durability_waits_for_replicas() {
    let Some(primary) = server("replica_durability", &[]).await else {
        return;
    };
    let of = primary.port().to_string();
    let Some(_replica) = server("replica_durability", &["--replicaof", "127.0.0.1", &of]).await
    else {
        return;
    };
    let one = RedisStore::connect(&url(&primary, "durability=replicas:1&wait_ms=5000"))
        .await
        .expect("store");
    // The replica may still be syncing: WAIT answers once it is connected.
    let mut done = false;
    for attempt in 0..50 {
        match commit_one(&one, &format!("m-{attempt}")).await {
            Ok(()) => {
                done = true;
                break;
            }
            Err(e) if e.is_unavailable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(done, "WAIT 1 never succeeded with one replica");
    let two = RedisStore::connect(&url(&primary, "durability=replicas:2&wait_ms=200"))
        .await
        .expect("store");
    let e = commit_one(&two, "m-two")
        .await
        .expect_err("two replicas wanted, one exists");
    assert!(e.is_unavailable(), "{e}");
}
