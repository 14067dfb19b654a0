//! Skipping (or failing, under CI) when a server is not running.

/// RabbitMQ's AMQP URL on this machine.
pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// NATS (JetStream enabled).
pub const NATS_URL: &str = "nats://127.0.0.1:4222";
/// Redis.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Mosquitto.
pub const MQTT_URL: &str = "mqtt://127.0.0.1:1883";
/// PostgreSQL (trust auth, database `test`).
pub const PG_URL: &str = oncely_testkit::services::DEFAULT_PG_URL;

pub use oncely_testkit::services::required;
pub use oncely_testkit::services::unique;

/// True if something listens on `addr`. When not: panics if services are required,
/// else prints a loud SKIPPED line for `test` and returns false (`oncely_testkit::services`).
pub fn available(test: &str, service: &str, addr: &str) -> bool {
    oncely_testkit::services::available_blocking(test, service, addr)
}
