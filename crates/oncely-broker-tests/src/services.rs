//! Skipping (or failing, under CI) when a server is not running.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// RabbitMQ's AMQP URL on this machine.
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// NATS (JetStream enabled).
pub const NATS_URL: &str = "nats://127.0.0.1:4222";
/// Redis.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Mosquitto.
pub const MQTT_URL: &str = "mqtt://127.0.0.1:1883";
/// PostgreSQL (trust auth, database `test`).
pub const PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// True when services are required (env `CI` or `ONCELY_REQUIRE_SERVICES` set).
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("ONCELY_REQUIRE_SERVICES").is_some()
}

/// True if something listens on `addr`. When not: panics if services are required,
/// else prints a loud SKIPPED line for `test` and returns false.
pub fn available(test: &str, service: &str, addr: &str) -> bool {
    let up = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    if up {
        return true;
    }
    if required() {
        panic!(
            "{test}: {service} is not reachable at {addr}, and CI/ONCELY_REQUIRE_SERVICES is set"
        );
    }
    eprintln!("=== SKIPPED {test}: {service} is not reachable at {addr} ===");
    false
}

/// A short random suffix for per-test names.
pub fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &id[..10])
}
