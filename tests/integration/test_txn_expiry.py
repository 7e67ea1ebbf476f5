"""Transactional ids expire (Kafka's ``transactional.id.expiration.ms``, issue 30) against a
real broker with a short expiration, checked every 500 ms: librdkafka transactional
producers each commit a transaction and close; kafka-python's ListTransactions shows their
ids, then none of them, while the id of a transaction still open stays listed. A broker
restarted after the expiry does not bring them back (it replays the tombstones;
DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND), the open transaction commits
afterwards and its id then expires too: the count reaches 0. An InitProducerId for an
expired id starts fresh, with a producer id never used before."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient
from kafka.errors import TransactionalIdNotFoundError

from tests.harness import BrokerProcess, wait_until
from tests.integration.groups.helpers import create_topic

pytestmark = pytest.mark.integration

EXPIRATION_MS = 8000
TOPIC = "txn-expiry"
CLOSED = [f"closed-{i}" for i in range(4)]
OPEN = "still-open"


@pytest.fixture
def expiring_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "transactional.id.expiration.ms": str(EXPIRATION_MS),
        "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
        "transaction.state.log.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("txn-expiry"), overrides).start()
    try:
        yield process
    finally:
        process.stop()


def listed(bootstrap: str) -> dict[str, tuple[int, str]]:
    """kafka-python's ListTransactions: transactional id -> (producer id, state)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        by_broker = admin.list_transactions()
    finally:
        admin.close()
    return {
        row.transactional_id: (row.producer_id, str(row.state.value))
        for rows in by_broker.values()
        for row in rows
    }


def described(bootstrap: str, txn_id: str) -> str:
    """kafka-python's DescribeTransactions of one id: its state, or "not found"
    (TRANSACTIONAL_ID_NOT_FOUND); other errors (a coordinator not ready yet) are retried."""

    def attempt() -> str:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            return str(admin.describe_transactions([txn_id])[txn_id].state.value)
        except TransactionalIdNotFoundError:
            return "not found"
        finally:
            admin.close()

    return str(wait_until(attempt, 60, f"DescribeTransactions of {txn_id}"))


def producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            # Far longer than the test: the open transaction must not be aborted on its own.
            "transaction.timeout.ms": 600_000,
        }
    )
    p.init_transactions(60)
    return p


def commit_one(p: Producer, value: bytes) -> None:
    p.begin_transaction()
    p.produce(TOPIC, value)
    p.commit_transaction(60)


def test_idle_ids_expire_and_stay_gone_after_a_restart(
    expiring_broker: BrokerProcess,
) -> None:
    bootstrap = expiring_broker.bootstrap
    create_topic(bootstrap, TOPIC, 1)
    open_producer = producer(bootstrap, OPEN)
    try:
        open_producer.begin_transaction()
        open_producer.produce(TOPIC, b"open")
        open_producer.flush(30)  # the partition is in the transaction: Ongoing
        used_pids: set[int] = set()
        last_commit = 0.0
        for txn_id in CLOSED:
            p = producer(bootstrap, txn_id)
            commit_one(p, txn_id.encode())
            p.close()
            last_commit = time.monotonic()
            # Just committed: listed (the expiration is seconds away).
            pid, state = listed(bootstrap)[txn_id]
            assert state == "CompleteCommit"
            used_pids.add(pid)
        rows = listed(bootstrap)
        assert rows[OPEN][1] == "Ongoing"
        used_pids.add(rows[OPEN][0])
        peak = len(rows)
        assert peak == len(CLOSED) + 1

        wait_until(
            lambda: set(listed(bootstrap)) == {OPEN}, 90, "the closed ids to expire", interval=0.5
        )
        # Not before the expiration had passed since the last one's commit (slack for the
        # two clocks' granularity); the open transaction is still there, still Ongoing.
        assert time.monotonic() - last_commit >= EXPIRATION_MS / 1000 - 0.2
        assert listed(bootstrap)[OPEN][1] == "Ongoing"

        # A crash and a restart replay __transaction_state: the tombstones keep them gone.
        # ListTransactions shows only the partitions loaded so far, so wait for the open
        # id; DescribeTransactions then loads each id's partition before it answers.
        expiring_broker.restart(crash=True)
        wait_until(lambda: OPEN in listed(bootstrap), 60, "the open id after the restart")
        for txn_id in CLOSED:
            assert described(bootstrap, txn_id) == "not found"
        assert described(bootstrap, OPEN) == "Ongoing"
        assert set(listed(bootstrap)) == {OPEN}

        # The open transaction ends; idle from then on, its id expires as well: none left.
        open_producer.commit_transaction(60)
    finally:
        open_producer.close()
    wait_until(lambda: listed(bootstrap) == {}, 90, "every id to expire", interval=0.5)

    # An expired id used again starts fresh: a producer id never handed out before.
    again = producer(bootstrap, CLOSED[0])
    try:
        commit_one(again, b"again")
        pid, state = listed(bootstrap)[CLOSED[0]]
        assert state == "CompleteCommit"
        assert pid not in used_pids
    finally:
        again.close()
