"""The peers' send loops (``tidelog.bench.peer_clients``) against fake clients on a fake
clock: every publisher holds the window and no more, and its clock starts when the client
holds the records, not before a wait for room or for the client's buffer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.bench.peer_clients import InFlight, nats_send_for, rabbit_send_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeJetStream:
    """publish_async: each PubAck comes ``delay`` fake seconds after the previous one, in
    a later turn of the event loop; records the most publishes ever unacknowledged."""

    def __init__(self, clock: FakeClock, delay: float) -> None:
        self.clock = clock
        self.delay = delay
        self.pending = 0
        self.most_pending = 0
        self.subjects: list[str] = []

    async def publish_async(self, subject: str, payload: bytes) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self.subjects.append(subject)
        self.pending += 1
        self.most_pending = max(self.most_pending, self.pending)

        def ack() -> None:
            self.clock.now += self.delay
            self.pending -= 1
            future.set_result("puback")

        loop.call_soon(ack)
        return future


def test_nats_latency_runs_from_room_in_the_window_to_the_puback() -> None:
    """Window of one record, each PubAck 5 s after its publish: every latency is 5 s.
    A clock started before waiting for room would read 10 s (the previous record's ack)."""
    clock = FakeClock()
    js = FakeJetStream(clock, delay=5.0)
    flight = InFlight(1, clock)

    async def run() -> int:
        sent = await nats_send_for(js, "bench.100", b"x" * 100, 50.0, flight)
        await flight.drain(10)
        return sent

    sent = asyncio.run(run())
    assert sent == 11  # publishes at 0, 5, ..., 50 (the last admitted as the time ran out)
    assert list(flight.latencies) == [5.0] * sent
    assert (flight.outstanding, flight.errors) == (0, 0)
    assert js.most_pending == 1


def test_nats_keeps_the_whole_window_in_flight_and_no_more() -> None:
    clock = FakeClock()
    js = FakeJetStream(clock, delay=1.0)
    flight = InFlight(3, clock)

    async def run() -> int:
        sent = await nats_send_for(js, "bench.100", b"x" * 100, 20.0, flight)
        await flight.drain(10)
        return sent

    sent = asyncio.run(run())
    assert js.most_pending == 3
    assert len(flight.latencies) == sent


def test_a_failed_publish_is_counted_and_frees_its_room() -> None:
    flight = InFlight(2)

    async def run() -> None:
        await flight.admit(2)
        flight.failed("APIError(code=503)")
        flight.acked(flight.clock())
        await flight.drain(1)

    asyncio.run(run())
    assert (flight.outstanding, flight.errors, len(flight.latencies)) == (0, 1, 1)
    assert flight.first_errors == ["APIError(code=503)"]


@dataclass
class Status:
    is_confirmed: bool
    response_code: int = 1


class FakeStreamProducer:
    """rstream's Producer: ``send_sub_entry`` waits ``lock_wait`` fake seconds for its
    buffer's lock before taking the entry; ``send_batch`` takes ``write`` fake seconds to
    write its frame. A confirm comes ``delay`` fake seconds later, in a later turn of the
    event loop: one per sub-entry, one per record of a batch. ``confirm_ok`` decides each
    confirm, numbered from 0."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        lock_wait: float = 0.0,
        write: float = 0.0,
        delay: float = 5.0,
        confirm_ok: Callable[[int], bool] = lambda _n: True,
    ) -> None:
        self.clock = clock
        self.lock_wait = lock_wait
        self.write = write
        self.delay = delay
        self.confirm_ok = confirm_ok
        self.confirms = 0
        self.calls: list[tuple[str, int]] = []

    def _confirm_later(self, callback: Callable[[Status], None], count: int) -> None:
        def confirm() -> None:
            self.clock.now += self.delay
            for _ in range(count):
                callback(Status(self.confirm_ok(self.confirms)))
                self.confirms += 1

        asyncio.get_running_loop().call_soon(confirm)

    async def send_sub_entry(
        self, stream: str, sub_entry_messages: list[bytes], *, on_publish_confirm: Any
    ) -> None:
        self.clock.now += self.lock_wait
        self.calls.append(("sub_entry", len(sub_entry_messages)))
        self._confirm_later(on_publish_confirm, 1)

    async def send_batch(
        self, stream: str, batch: list[bytes], *, on_publish_confirm: Any
    ) -> list[int]:
        self.calls.append(("batch", len(batch)))
        self._confirm_later(on_publish_confirm, len(batch))
        self.clock.now += self.write
        return []


def _send(producer: FakeStreamProducer, flight: InFlight, size: int, seconds: float) -> int:
    async def run() -> int:
        sent = await rabbit_send_for(producer, "bench", b"x" * size, seconds, flight)
        await flight.drain(10)
        return sent

    return asyncio.run(run())


def test_a_sub_entry_is_timed_from_when_rstream_has_taken_it() -> None:
    """100 B records go in sub-entries of 100; the 2 s waited for rstream's buffer lock
    come before the entry is the client's, so each record's latency is the confirm's 5 s."""
    clock = FakeClock()
    producer = FakeStreamProducer(clock, lock_wait=2.0, delay=5.0)
    flight = InFlight(100, clock)
    sent = _send(producer, flight, 100, 20.0)
    assert sent == 400  # entries taken at 2, 9, 16 and 23: the last waited for room from 16
    assert set(producer.calls) == {("sub_entry", 100)}
    assert list(flight.latencies) == [5.0] * sent


def test_a_batch_is_timed_from_the_call_that_writes_it() -> None:
    """64 KiB records go in send_batch frames of 10, one confirm per record; the call
    writes the frame (1 s), which is part of the latency: 1 s + the confirm's 5 s."""
    clock = FakeClock()
    producer = FakeStreamProducer(clock, write=1.0, delay=5.0)
    flight = InFlight(10, clock)
    sent = _send(producer, flight, 65_536, 20.0)
    assert sent == 50  # calls at 0, 6, 12, 18 and 24: the last waited for room from 19
    assert set(producer.calls) == {("batch", 10)}
    assert list(flight.latencies) == [6.0] * sent


def test_rstream_keeps_the_window_in_whole_calls() -> None:
    """A window of 250 records holds two sub-entries of 100, never a third."""
    clock = FakeClock()
    producer = FakeStreamProducer(clock, delay=1.0)
    flight = InFlight(250, clock)
    most: list[int] = []
    real_admit = flight.admit

    async def admit(records: int) -> None:
        await real_admit(records)
        most.append(flight.outstanding)

    flight.admit = admit  # type: ignore[method-assign]
    _send(producer, flight, 100, 10.0)
    assert max(most) == 200


def test_an_unconfirmed_sub_entry_counts_each_of_its_records_as_an_error() -> None:
    clock = FakeClock()
    producer = FakeStreamProducer(clock, confirm_ok=lambda n: n != 1)
    flight = InFlight(100, clock)
    sent = _send(producer, flight, 100, 12.0)
    assert sent == 400
    assert (flight.errors, len(flight.latencies), flight.outstanding) == (100, 300, 0)
    assert flight.first_errors == ["response code 1"]
