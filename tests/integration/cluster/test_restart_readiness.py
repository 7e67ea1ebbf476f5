"""A restarted broker answers clients only from the cluster's metadata (issue 18).

A broker SIGKILLed and started again at once waits for its stale ``/brokers/ids/N`` to
expire (the ZooKeeper session timeout) before it registers, with its listener already up.
Before issue 18 it answered Metadata from its empty cache meanwhile: UNKNOWN_TOPIC_OR_PARTITION
for a healthy topic, and librdkafka failed its queued messages with ``_UNKNOWN_TOPIC``.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import BrokerCluster, wait_until
from tests.integration.cluster.helpers import create_topic
from tidelog.client import BlockingClient
from tidelog.client.errors import ClientError
from tidelog.errors import ErrorCode

pytestmark = pytest.mark.integration

STALE_WAIT = "waiting for a stale registration"


def _kill_and_start_at_once(cluster: BrokerCluster, broker_id: int) -> None:
    """SIGKILL, then start at once: the new process is listening (ApiVersions answered)
    while its old registration has not expired yet."""
    victim = cluster.broker(broker_id)
    victim.kill()
    victim.start()
    # The listener answers before the registration is tried (and the wait logged): give the
    # log line a moment rather than racing it.
    wait_until(lambda: STALE_WAIT in victim.output(), 10.0, "the wait for the old registration")


def test_a_restarted_broker_answers_metadata_only_from_the_clusters_view(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster, "chaos", partitions=6)
    _kill_and_start_at_once(cluster, 1)
    victim = cluster.broker(1)
    asked_at = time.monotonic()
    # Asked while the broker waits for its old registration to expire: the request is held
    # until the broker has the controller's view, and then answered from it.
    with BlockingClient(victim.bootstrap, request_timeout_s=30.0) as client:
        topic = client.metadata(["chaos"]).topics["chaos"]
    waited_s = time.monotonic() - asked_at
    assert topic.error_code == ErrorCode.NONE, (topic, victim.output()[-3000:])
    assert sorted(topic.partitions) == list(range(6))
    assert "serving clients" in victim.output()
    print(f"Metadata held {waited_s:.1f} s until the restarted broker had the cluster's view")


def test_a_request_held_too_long_closes_its_connection_and_never_says_unknown_topic(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster, "chaos", partitions=6)
    victim = cluster.broker(2)
    victim.properties["tidelog.not.ready.request.hold.ms"] = "500"
    _kill_and_start_at_once(cluster, 2)
    # The stale registration lasts the session timeout (several seconds): held 0.5 s, the
    # request gets no answer at all, only its connection closed.
    with (
        BlockingClient(victim.bootstrap, request_timeout_s=30.0) as client,
        pytest.raises(ClientError),
    ):
        client.metadata(["chaos"])
    assert "has not received the cluster's metadata" in victim.output()

    answers: list[tuple[ErrorCode, int]] = []

    def described() -> bool:
        with BlockingClient(victim.bootstrap, request_timeout_s=30.0) as client:
            topic = client.metadata(["chaos"]).topics["chaos"]
        answers.append((topic.error_code, len(topic.partitions)))
        return True

    # Once registered and told, it answers; in between, only closed connections (which
    # wait_until retries), and the first answer it gives is the whole topic.
    wait_until(described, 60.0, "the restarted broker to answer Metadata")
    assert answers == [(ErrorCode.NONE, 6)]


def test_a_broker_whose_session_expired_serves_again_once_described_anew(
    cluster: BrokerCluster,
) -> None:
    create_topic(cluster, "chaos", partitions=6)
    victim = cluster.broker(0)
    # Longer than the ZooKeeper session (6 s, capped at 20 ticks = 5 s by the server).
    victim.pause()
    time.sleep(8.0)
    victim.resume()

    def served_again() -> bool:
        out = victim.output()
        closed = out.find("not serving clients until the controller's metadata comes")
        return closed >= 0 and out.find("serving clients (", closed) >= 0

    wait_until(served_again, 60.0, "the broker to close its gate and open it again")
    out = victim.output()
    assert "ZooKeeper session expired" in out
    assert "re-registered, broker epoch" in out
    with BlockingClient(victim.bootstrap, request_timeout_s=30.0) as client:
        topic = client.metadata(["chaos"]).topics["chaos"]
    assert topic.error_code == ErrorCode.NONE
    assert sorted(topic.partitions) == list(range(6))
