"""The readiness gate (``tidelog.server.cluster.readiness``): when a cluster broker may answer
clients."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from tidelog.protocol.apis import ApiKey
from tidelog.server.cluster.readiness import NotReadyError, ReadinessGate


def on_a_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The gate's timers need a running loop."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


class Recorder:
    """What the dispatcher would do with held requests: run them or fail them."""

    def __init__(self, gate: ReadinessGate) -> None:
        self.gate = gate
        self.ran: list[str] = []
        self.failed: list[tuple[str, NotReadyError]] = []
        self.closed: set[object] = set()

    def submit(self, conn: object, name: str, api_key: ApiKey, body: Any = None) -> bool:
        """Dispatch one request; True if it ran at once."""
        if not self.gate.must_hold(conn, api_key, body):
            self.ran.append(name)
            return True

        def fail(exc: NotReadyError) -> None:
            self.failed.append((name, exc))
            self.closed.add(conn)

        self.gate.hold(
            conn,
            api_key,
            body,
            run=lambda: self.ran.append(name),
            fail=fail,
            done=lambda: conn in self.closed,
        )
        return False


def consumer_fetch() -> Any:
    return SimpleNamespace(replica_state=SimpleNamespace(replica_id=-1))


def follower_fetch(replica_id: int) -> Any:
    return SimpleNamespace(replica_state=SimpleNamespace(replica_id=replica_id))


@on_a_loop
async def test_client_requests_wait_for_registration_and_the_controllers_metadata() -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    r = Recorder(gate)
    client, controller, follower = object(), object(), object()
    assert not r.submit(client, "metadata", ApiKey.METADATA)
    assert not r.submit(client, "produce", ApiKey.PRODUCE)
    assert not r.submit(object(), "consumer fetch", ApiKey.FETCH, consumer_fetch())
    # Requests to the controller and the replicas' own requests pass (rule 4) ...
    assert r.submit(object(), "alter partition", ApiKey.ALTER_PARTITION)
    assert r.submit(follower, "follower fetch", ApiKey.FETCH, follower_fetch(2))
    assert r.submit(object(), "api versions", ApiKey.API_VERSIONS)
    # ... the controller's wait for the registration, so that the broker can refuse one
    # addressed to an earlier incarnation of itself (KIP-380).
    assert not r.submit(controller, "leader and isr", ApiKey.LEADER_AND_ISR)
    assert not r.submit(controller, "update metadata", ApiKey.UPDATE_METADATA)
    # An UpdateMetadata before the registration is not for this incarnation yet ...
    gate.applied_update_metadata(7)
    assert not gate.is_open
    gate.registered(8)
    assert not gate.is_open
    assert r.ran == [
        "alter partition",
        "follower fetch",
        "api versions",
        "leader and isr",
        "update metadata",
    ]
    # ... the one addressed to the registration's broker epoch opens the gate, and every
    # held request runs, in arrival order.
    gate.applied_update_metadata(8)
    assert gate.is_open
    assert r.ran[5:] == ["metadata", "produce", "consumer fetch"]
    assert r.submit(client, "metadata again", ApiKey.METADATA)
    assert not r.failed


@on_a_loop
async def test_update_metadata_before_the_registration_completes_counts() -> None:
    """The controller may see the new registration and send its view before the broker's
    own registration call has returned."""
    gate = ReadinessGate(1, hold_s=60.0)
    gate.applied_update_metadata(5)
    assert not gate.is_open
    gate.registered(5)
    assert gate.is_open


@on_a_loop
async def test_a_late_update_metadata_of_an_earlier_incarnation_does_not_close_the_gate() -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    gate.registered(5)
    gate.applied_update_metadata(5)
    gate.applied_update_metadata(3)
    assert gate.is_open


@on_a_loop
async def test_update_metadata_without_a_broker_epoch_counts_for_any_registration() -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    gate.applied_update_metadata(-1)
    gate.registered(5)
    assert gate.is_open


@on_a_loop
async def test_session_expiry_closes_the_gate_until_the_new_registration_is_described() -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    r = Recorder(gate)
    conn = object()
    gate.registered(5)
    gate.applied_update_metadata(5)
    gate.session_expired()
    assert not r.submit(conn, "metadata", ApiKey.METADATA)
    gate.registered(9)
    # The old incarnation's view does not open it.
    gate.applied_update_metadata(5)
    assert r.ran == []
    gate.applied_update_metadata(9)
    assert r.ran == ["metadata"]


@on_a_loop
async def test_once_a_request_is_held_later_ones_on_its_connection_wait_behind_it() -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    r = Recorder(gate)
    conn, other = object(), object()
    assert not r.submit(conn, "metadata", ApiKey.METADATA)
    # Would pass alone, but may not overtake the held request on its connection (rule 5).
    assert not r.submit(conn, "api versions", ApiKey.API_VERSIONS)
    assert r.submit(other, "other api versions", ApiKey.API_VERSIONS)
    gate.registered(1)
    gate.applied_update_metadata(1)
    assert r.ran == ["other api versions", "metadata", "api versions"]
    assert r.submit(conn, "after", ApiKey.API_VERSIONS)


@on_a_loop
async def test_a_request_held_longer_than_the_hold_fails_and_nothing_runs_later() -> None:
    gate = ReadinessGate(3, hold_s=0.05)
    r = Recorder(gate)
    conn = object()
    assert not r.submit(conn, "metadata", ApiKey.METADATA)
    assert not r.submit(conn, "produce", ApiKey.PRODUCE)
    await asyncio.sleep(0.2)
    # The first failure closes the connection: the request behind it is dropped with it.
    assert [name for name, _ in r.failed] == ["metadata"]
    assert "broker 3 has not received the cluster's metadata" in str(r.failed[0][1])
    gate.registered(1)
    gate.applied_update_metadata(1)
    assert r.ran == []
    # A new connection is served at once.
    assert r.submit(object(), "metadata", ApiKey.METADATA)


@on_a_loop
async def test_held_requests_of_a_closed_connection_are_dropped_on_release() -> None:
    gate = ReadinessGate(3, hold_s=60.0)
    r = Recorder(gate)
    gone, alive = object(), object()
    r.submit(gone, "gone", ApiKey.METADATA)
    r.submit(alive, "alive", ApiKey.METADATA)
    r.closed.add(gone)
    gate.registered(1)
    gate.applied_update_metadata(1)
    assert r.ran == ["alive"]


@pytest.mark.parametrize(
    "body",
    [
        SimpleNamespace(replica_id=2),  # Fetch before v15
        SimpleNamespace(replica_state=SimpleNamespace(replica_id=2)),  # Fetch v15+
    ],
)
@on_a_loop
async def test_follower_requests_pass_in_every_fetch_version(body: Any) -> None:
    gate = ReadinessGate(1, hold_s=60.0)
    assert not gate.must_hold(object(), ApiKey.FETCH, body)
    assert not gate.must_hold(object(), ApiKey.OFFSET_FOR_LEADER_EPOCH, body)
    assert gate.must_hold(object(), ApiKey.FETCH, SimpleNamespace(replica_id=-1))
