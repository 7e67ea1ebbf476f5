"""One consumer group member as its own process, for tests that kill or stop members.

``python -m tests.integration.groups.member CLIENT BOOTSTRAP GROUP TOPIC`` with CLIENT one
of ``confluent``, ``kafka-python``, ``aiokafka``. It subscribes, consumes, commits after
every poll, and prints one JSON line per change of its assignment
(``{"client": ..., "assignment": [partitions]}``) and per consumed record
(``{"record": [partition, offset]}`` when ``--records``). SIGTERM: close the consumer
cleanly (LeaveGroup) and exit 0; SIGKILL is the test's way to make it die silently.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

SESSION_MS = 3000
HEARTBEAT_MS = 500
MAX_POLL_MS = 15000

stopping = False


def _stop(_signum: int, _frame: object) -> None:
    global stopping  # noqa: PLW0603 - the one flag a signal handler may set
    stopping = True


def say(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": "confluent",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "max.poll.interval.ms": MAX_POLL_MS,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([args.topic])
    last: list[int] | None = None
    while not stopping:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            if args.records:
                say({"record": [msg.partition(), msg.offset()]})
            try:
                consumer.commit(message=msg, asynchronous=False)
            except Exception as exc:  # a commit refused by a rebalance: the client's normal life
                say({"commit_error": str(exc)})
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != last:
            last = now
            say({"client": "confluent", "assignment": now})
    consumer.close()


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id="kafka-python",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
        metadata_max_age_ms=1000,
    )
    last: list[int] | None = None
    while not stopping:
        batches = consumer.poll(timeout_ms=200)
        for records in batches.values():
            for r in records:
                if args.records:
                    say({"record": [r.partition, r.offset]})
        if batches:
            try:
                consumer.commit()
            except Exception as exc:
                say({"commit_error": str(exc)})
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != last:
            last = now
            say({"client": "kafka-python", "assignment": now})
    consumer.close()


async def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id="aiokafka",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
        metadata_max_age_ms=1000,
    )
    await consumer.start()
    last: list[int] | None = None
    try:
        while not stopping:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for r in records:
                    if args.records:
                        say({"record": [r.partition, r.offset]})
            if batches:
                try:
                    await consumer.commit()
                except Exception as exc:
                    say({"commit_error": str(exc)})
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != last:
                last = now
                say({"client": "aiokafka", "assignment": now})
    finally:
        await consumer.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--records", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    if args.client == "confluent":
        run_confluent(args)
    elif args.client == "kafka-python":
        run_kafka_python(args)
    else:
        asyncio.run(run_aiokafka(args))
    say({"client": args.client, "closed": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
