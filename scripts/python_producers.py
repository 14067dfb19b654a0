#!/usr/bin/env python3
"""Publish oncely messages from Python with each broker's ordinary client.

Shows (and tests) how a producer in another language sets the message id so that
oncely consumers dedup it. Payload: the demo's JSON, {"account": "acct-17", "amount": 5}.

    pip install pika nats-py redis paho-mqtt
    python3 scripts/python_producers.py amqp  --url amqp://guest:guest@127.0.0.1:5672/%2f --target credits
    python3 scripts/python_producers.py nats  --url nats://127.0.0.1:4222 --target credits --stream CREDITS
    python3 scripts/python_producers.py redis --url redis://127.0.0.1:6379/0 --target credits
    python3 scripts/python_producers.py mqtt  --url mqtt://127.0.0.1:1883 --target credits [--mqtt-v311]

Publishes --count unique messages with ids "{prefix}-{i}", about --dup-rate of them twice
(identical copies, shuffled), about --conflict-rate of them a second time with the same id
and another amount (a conflict: the consumer must dead-letter one copy, reason conflict),
plus --bad messages without any id (they must end in the consumer's dead-letter table with
reason bad_id). With --out FILE it writes a manifest of what it published (publish order;
"conflicts" lists the conflicting copies), so a checker can compare the database with it.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import time
from urllib.parse import urlparse


class Pacer:
    """Spreads publishing over time: at most `rate` messages per second (0: no limit)."""

    def __init__(self, rate):
        self.rate, self.sent, self.start = rate, 0, time.monotonic()

    def delay(self):
        self.sent += 1
        if self.rate <= 0:
            return 0.0
        return max(0.0, self.start + self.sent / self.rate - time.monotonic())

    def tick(self):
        time.sleep(self.delay())


def workload(prefix, count, dup_rate, bad, seed, conflict_rate=0.0):
    rng = random.Random(seed)
    unique = []
    for i in range(count):
        payload = json.dumps({"account": f"acct-{i % 50}", "amount": rng.randint(1, 100)})
        unique.append((f"{prefix}-{i}", payload))
    messages = list(unique) + [m for m in unique if rng.random() < dup_rate]
    conflicts = []
    if conflict_rate > 0:
        # Same id, same account, another amount: never an exact copy of the original.
        for msg_id, payload in unique:
            if rng.random() < conflict_rate:
                body = json.loads(payload)
                body["amount"] += rng.randint(1, 50)
                conflicts.append((msg_id, json.dumps(body)))
        messages += conflicts
    bad_payloads = [json.dumps({"account": f"bad-{prefix}-{i}", "amount": 1}) for i in range(bad)]
    messages += [(None, p) for p in bad_payloads]
    rng.shuffle(messages)
    return unique, bad_payloads, messages, conflicts


def publish_amqp(url, target, messages, pace):
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    # oncely declares its queues as quorum queues (exact delivery counts); declare alike.
    ch.queue_declare(queue=target, durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for msg_id, payload in messages:
        props = pika.BasicProperties(
            message_id=msg_id,  # the id: AMQP message_id property
            delivery_mode=2,
            timestamp=int(time.time()),
            headers={"oncely-source-time": int(time.time() * 1000)},
        )
        ch.basic_publish(exchange="", routing_key=target, body=payload.encode(), properties=props)
        pace.tick()
    conn.close()


def publish_nats(url, target, messages, stream, pace):
    import nats

    async def run():
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            await js.stream_info(stream)
        except Exception:
            await js.add_stream(name=stream, subjects=[target])
        for msg_id, payload in messages:
            headers = {"Nats-Msg-Id": msg_id} if msg_id else None  # the id: Nats-Msg-Id
            await js.publish(target, payload.encode(), headers=headers)
            await asyncio.sleep(pace.delay())
        await nc.close()

    asyncio.run(run())


def publish_redis(url, target, messages, pace):
    import redis

    r = redis.Redis.from_url(url)
    pipe = r.pipeline(transaction=False)
    for msg_id, payload in messages:
        fields = {"payload": payload}
        if msg_id:
            fields["message_id"] = msg_id  # the id: field message_id
        pipe.xadd(target, fields)
        wait = pace.delay()
        if wait > 0:
            pipe.execute()
            time.sleep(wait)
    pipe.execute()


def publish_mqtt(url, target, messages, v311, pace):
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    u = urlparse(url)
    protocol = mqtt.MQTTv311 if v311 else mqtt.MQTTv5
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=f"py-producer-{random.getrandbits(32)}",
        protocol=protocol,
    )
    client.connect(u.hostname or "127.0.0.1", u.port or 1883)
    client.loop_start()
    for msg_id, payload in messages:
        props = None
        if v311:
            # MQTT 3.1.1 has no properties: the id goes into the JSON payload.
            if msg_id:
                body = json.loads(payload)
                payload = json.dumps({"message_id": msg_id, **body})
        elif msg_id:
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = [("message-id", msg_id)]  # the id: user property message-id
        info = client.publish(target, payload.encode(), qos=1, properties=props)
        info.wait_for_publish(timeout=30)
        pace.tick()
    client.loop_stop()
    client.disconnect()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("broker", choices=["amqp", "nats", "redis", "mqtt"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--target", required=True, help="queue / subject / stream key / topic")
    ap.add_argument("--stream", default="ONCELY", help="NATS stream (created if missing)")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--dup-rate", type=float, default=0.2)
    ap.add_argument("--conflict-rate", type=float, default=0.0)
    ap.add_argument("--bad", type=int, default=1)
    ap.add_argument("--prefix", default="py")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mqtt-v311", action="store_true")
    ap.add_argument("--rate", type=float, default=0, help="messages per second at most (0: no limit)")
    ap.add_argument(
        "--out",
        help="write a manifest of what is published (before publishing, atomically: a consumer "
        "started once it exists can be checked against it)",
    )
    a = ap.parse_args()
    unique, bad, messages, conflicts = workload(
        a.prefix, a.count, a.dup_rate, a.bad, a.seed, a.conflict_rate
    )
    if a.broker == "mqtt" and a.mqtt_v311:
        # The payload a v3.1.1 producer sends carries the id: record those payloads.
        def with_id(i, p):
            return json.dumps({"message_id": i, **json.loads(p)})
        unique = [(i, with_id(i, p)) for i, p in unique]
        conflicts = [(i, with_id(i, p)) for i, p in conflicts]
        messages = [(i, with_id(i, p) if i else p) for i, p in messages]
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump({"unique": unique, "bad": bad, "messages": messages, "conflicts": conflicts}, f)
        os.replace(a.out + ".tmp", a.out)
    pace = Pacer(a.rate)
    if a.broker == "mqtt" and a.mqtt_v311:
        publish_mqtt(a.url, a.target, [(None, p) for _, p in messages], True, pace)
    elif a.broker == "amqp":
        publish_amqp(a.url, a.target, messages, pace)
    elif a.broker == "nats":
        publish_nats(a.url, a.target, messages, a.stream, pace)
    elif a.broker == "redis":
        publish_redis(a.url, a.target, messages, pace)
    else:
        publish_mqtt(a.url, a.target, messages, False, pace)
    print(
        f"{a.broker}: published {len(messages)} messages ({len(unique)} unique, "
        f"{len(conflicts)} conflicting copies, {len(bad)} without id)"
    )


if __name__ == "__main__":
    sys.exit(main())
