//! MQTT (Mosquitto): a topic per cell; the bare consumer is rumqttc, MQTT 5, QoS 1, manual
//! PUBACK per message.
//!
//! Mosquitto at its defaults keeps at most `max_queued_messages` (1000) messages queued for a
//! subscriber beyond those in flight and drops the rest, so a backlog published before the
//! consumer runs must stay below that: the MQTT cells hold at most [`MAX_BACKLOG`] messages
//! (fewer than the other broker cells). Both consumers subscribe with a persistent session
//! first, the backlog is published, then the clock starts. A dropped message would show as
//! lost in the checker (oncely) or as a bare consumer that never reaches its count.

use anyhow::{Context, Result, bail};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use std::time::Duration;

/// The most messages an MQTT cell publishes ahead (below Mosquitto's default
/// `max_queued_messages` of 1000).
pub(super) const MAX_BACKLOG: usize = 900;

fn host_port(base: &str) -> Result<(String, u16)> {
    let rest = base
        .strip_prefix("mqtt://")
        .with_context(|| format!("not an mqtt:// URL: {base}"))?;
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    Ok(match rest.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse().context("bad port")?),
        None => (rest.to_owned(), 1883),
    })
}

fn client(base: &str, id: &str, persistent: bool) -> Result<(AsyncClient, EventLoop)> {
    let (host, port) = host_port(base)?;
    let mut o = MqttOptions::new(id, host, port);
    o.set_keep_alive(Duration::from_secs(10));
    o.set_manual_acks(true);
    o.set_clean_start(!persistent);
    if persistent {
        o.set_session_expiry_interval(Some(600));
    }
    o.set_receive_maximum(Some(oncely_mqtt_inflight()));
    Ok(AsyncClient::new(o, 1024))
}

/// The receive maximum oncely's MQTT source asks for by default, given to the bare consumer
/// too (the same read-ahead).
fn oncely_mqtt_inflight() -> u16 {
    u16::try_from(super::default_read_ahead()).unwrap_or(u16::MAX)
}

pub(super) async fn probe(url: &str) -> Result<()> {
    let (_client, mut events) = client(
        url,
        &format!("oncely-bench-probe-{}", std::process::id()),
        false,
    )?;
    loop {
        if let Event::Incoming(Packet::ConnAck(_)) = events.poll().await? {
            return Ok(());
        }
    }
}

fn topic(name: &str) -> String {
    format!("oncely-bench/{name}")
}

/// oncely's source URL for topic `name`: the topic and a client id of its own.
pub(super) fn source_url(base: &str, name: &str) -> String {
    let base = base.trim_end_matches('/');
    format!("{base}?topic={}&client_id={name}-oncely", topic(name))
}

/// Creates session `id` at the broker, subscribed to the cell's topic, and leaves it: from
/// then on the broker queues the topic's messages for it (it queues only for sessions that
/// exist), so a consumer connecting with `id` finds the whole backlog.
pub(super) async fn prepare(base: &str, name: &str, id: &str) -> Result<()> {
    let (client, mut events) = client(base, id, true)?;
    loop {
        match events.poll().await? {
            Event::Incoming(Packet::ConnAck(_)) => {
                client.subscribe(topic(name), QoS::AtLeastOnce).await?;
            }
            Event::Incoming(Packet::SubAck(_)) => break,
            _ => {}
        }
    }
    client.disconnect().await?;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while events.poll().await.is_ok() {}
    })
    .await;
    Ok(())
}

/// Resumes session `id` (see [`prepare`]), then consumes + acks until `n` (each PUBACK
/// handed to rumqttc as its publish is read and written by the event loop, no round trip
/// awaited), timed from the CONNACK as oncely's cell is timed from its source's start.
pub(super) async fn bare(base: &str, id: &str, n: usize) -> Result<Duration> {
    let (client, mut events) = client(base, id, true)?;
    loop {
        if let Event::Incoming(Packet::ConnAck(_)) = events.poll().await? {
            break;
        }
    }
    super::timed(async {
        let mut received = 0;
        while received < n {
            match events.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    received += 1;
                    client.ack(&p).await?;
                }
                Ok(_) => {}
                Err(e) => bail!("bare MQTT consumer after {received} of {n}: {e}"),
            }
        }
        // The last PUBACKs go out with the next polls.
        let _ = tokio::time::timeout(Duration::from_millis(50), async {
            while events.poll().await.is_ok() {}
        })
        .await;
        Ok(())
    })
    .await
}

/// Ends session `id` at the broker (a clean start with no expiry drops it).
pub(super) async fn remove(base: &str, id: &str) -> Result<()> {
    let (client, mut events) = client(base, id, false)?;
    loop {
        if let Event::Incoming(Packet::ConnAck(_)) = events.poll().await? {
            break;
        }
    }
    client.disconnect().await?;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while events.poll().await.is_ok() {}
    })
    .await;
    Ok(())
}
