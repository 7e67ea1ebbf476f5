"""The controller's decision history (tidelog.controller.history): how a written state is
classified, the reasons, the bound, and the batched writes to ZooKeeper."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from tidelog.controller import history as h
from tidelog.controller.history import Cause, ControllerHistory, classify
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, TopicPartition
from tidelog.zk.znodes import PartitionState

TP = TopicPartition("t", 0)


def state(leader: int, epoch: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(
        leader=BrokerId(leader),
        leader_epoch=LeaderEpoch(epoch),
        isr=tuple(BrokerId(b) for b in isr),
        controller_epoch=ControllerEpoch(1),
    )


@pytest.mark.parametrize(
    ("before", "after", "trigger", "kind", "text"),
    [
        (state(1, 0, (1, 2, 3)), state(2, 1, (2, 3)), "", "election", "broker 2 elected from"),
        (state(1, 0, (1,)), state(2, 1, (2,)), "", "unclean_election", "no ISR member alive"),
        (state(1, 0, (1,)), state(NO_BROKER, 1, (1,)), "", "offline", "partition offline"),
        (state(1, 0, (1, 2, 3)), state(1, 0, (1, 2)), "alter_partition", "isr_shrink", "3 lagged"),
        (state(1, 0, (1, 2, 3)), state(1, 0, (1, 2)), "broker_failure", "isr_shrink", "3 removed"),
        (state(1, 0, (1, 2)), state(1, 0, (1, 2, 3)), "alter_partition", "isr_expand", "caught up"),
        (state(1, 0, (1, 2)), state(1, 0, (1, 3)), "", "isr_change", "ISR change"),
    ],
)
def test_classify(
    before: PartitionState, after: PartitionState, trigger: str, kind: str, text: str
) -> None:
    got_kind, what = classify(before, after, trigger)
    assert got_kind == kind
    assert text in what


def test_a_dead_leader_and_a_dead_isr_member_are_named() -> None:
    cause = h.dead_brokers({2, 3})
    assert cause.trigger == "broker_failure"
    assert cause.text(TP, state(2, 0, (2, 3, 1))) == "leader 2 died; ISR member 3 died"
    assert cause.text(TP, state(1, 0, (1, 2, 3))) == "ISR members 2, 3 died"


def test_after_failover_tells_dead_from_restarted() -> None:
    cause = h.after_failover(live={1, 3}, restarted={TP: {3}})
    assert cause.trigger == "failover"
    assert cause.text(TP, state(2, 0, (2, 3, 1))) == (
        "leader 2 died; ISR member 3 restarted while there was no controller"
    )


def test_partition_changed_records_old_and_new_state_and_the_reason() -> None:
    history = ControllerHistory(None, 1)
    history.controller_epoch = 7
    seen: list[dict[str, Any]] = []
    history.subscribe(seen.append)
    event = history.partition_changed(
        TP, state(1, 4, (1, 2, 3)), state(2, 5, (2, 3)), h.dead_brokers({1})
    )
    assert event is not None
    assert seen == [event]
    assert event["kind"] == "election"
    assert event["reason"] == "leader 1 died: broker 2 elected from the ISR [1, 2, 3]"
    assert (event["topic"], event["partition"]) == ("t", 0)
    assert (event["old_leader"], event["new_leader"], event["leader_epoch"]) == (1, 2, 5)
    assert (event["old_isr"], event["new_isr"]) == ([1, 2, 3], [2, 3])
    assert (event["controller"], event["controller_epoch"]) == (1, 7)
    # The same state again is no decision.
    same = state(2, 5, (2, 3))
    assert history.partition_changed(TP, same, same, Cause("x", "y")) is None
    assert len(history.events) == 1


def test_history_is_bounded_and_ids_are_unique() -> None:
    history = ControllerHistory(None, 1, capacity=10)
    for i in range(25):
        history.record("broker_start", f"broker {i} started", broker=i)
    assert len(history.events) == 10
    assert history.events[0]["reason"] == "broker 15 started"
    assert len({e["id"] for e in history.events}) == 10


def test_encoded_history_fits_the_size_bound() -> None:
    events = [{"id": str(i), "reason": "x" * 2000} for i in range(1000)]
    data = h.encode_history(events)
    assert len(data) <= h.MAX_BYTES
    kept = h.decode_history(data)
    assert 0 < len(kept) < 1000
    assert kept[-1]["id"] == "999"  # the newest kept
    assert h.decode_history(b"not json") == []
    assert h.decode_history(b'{"version":1}') == []
    assert h.decode_history(None) == []


def test_events_encoded_one_by_one_join_into_the_same_bytes() -> None:
    """A write joins each event's JSON, kept since it was recorded: the same document as
    encoding the whole list, under the size bound too."""
    history = ControllerHistory(None, 1, capacity=10)
    for i in range(25):
        history.record("broker_start", f"broker {i} started", broker=i, isr=[i, 2])
    encoded = [h.encode_event(e) for e in history.events]
    assert h.join_history(encoded) == h.encode_history(history.events)
    assert h.join_history([]) == h.encode_history([]) == b'{"version":1,"events":[]}'
    big = [{"id": str(i), "reason": "x" * 2000} for i in range(1000)]
    joined = h.join_history([h.encode_event(e) for e in big])
    assert joined == h.encode_history(big)
    assert json.loads(joined) == {"version": 1, "events": h.decode_history(joined)}


class FakeKazoo:
    def __init__(self) -> None:
        self.data: bytes | None = None
        self.writes = 0

    def retry(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def get(self, path: str) -> tuple[bytes, object]:
        assert path == h.HISTORY_PATH
        if self.data is None:
            raise NoNodeError
        return self.data, object()

    def set(self, path: str, data: bytes) -> None:
        if self.data is None:
            raise NoNodeError
        self.data = data
        self.writes += 1

    def create(self, path: str, data: bytes, makepath: bool = False) -> None:
        assert makepath
        self.data = data
        self.writes += 1


class FakeZk:
    def __init__(self) -> None:
        self.kazoo = FakeKazoo()

    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


def test_writes_are_batched_and_a_new_controller_appends() -> None:
    async def body() -> None:
        zk = FakeZk()
        first = ControllerHistory(zk, 1)  # type: ignore[arg-type]
        await first.take_over(3)
        for i in range(50):
            first.record("broker_start", f"broker {i} started")
        await asyncio.sleep(h.FLUSH_INTERVAL_S * 3)
        assert zk.kazoo.writes == 1  # 51 events, one write
        stored = json.loads(zk.kazoo.data or b"")
        assert stored["version"] == 1
        assert len(stored["events"]) == 51
        # It resigns: a pending write is dropped.
        first.record("broker_death", "broker 9 died")
        first.resign()
        await asyncio.sleep(h.FLUSH_INTERVAL_S * 2)
        assert zk.kazoo.writes == 1
        # Another broker takes over: it finds the 51 and appends its failover.
        second = ControllerHistory(zk, 2)  # type: ignore[arg-type]
        await second.take_over(4)
        assert len(second.events) == 52
        last = second.events[-1]
        assert last["kind"] == "controller_failover"
        assert last["reason"] == (
            "broker 2 became the controller, epoch 4 (previous controller: broker 1)"
        )
        await asyncio.sleep(h.FLUSH_INTERVAL_S * 2)
        assert len(await h.read_history(zk)) == 52  # type: ignore[arg-type]
        await second.close()

    asyncio.run(body())


def test_brokers_gone_at_failover_are_recorded_as_deaths() -> None:
    history = ControllerHistory(None, 0)
    states = {
        TP: state(2, 3, (2, 1)),
        TopicPartition("t", 1): state(NO_BROKER, 1, (3,)),
        TopicPartition("t", 2): state(1, 0, (1,)),
    }
    history.brokers_gone(live={0, 1}, states=states)
    assert [(e["kind"], e["broker"]) for e in history.events] == [
        ("broker_death", 2),
        ("broker_death", 3),
    ]
    assert "not registered when this controller took over" in history.events[0]["reason"]
