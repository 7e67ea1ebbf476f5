"""The peers' publishers: nats-py and rstream send loops under the Kafka producers' window
and timer, run as workers in their own processes.

Like-for-like with ``kafka.produce_worker`` (librdkafka):

- **Window**: at most ``bench.common.window(size)`` records handed to the client and not
  yet acknowledged to the application (32 MiB of payload), the bound librdkafka's queue
  puts on a producer; :class:`InFlight` admits a send only when it fits. The client's own
  bound is set at or above it (nats-py ``publish_async_max_pending``), so no wait happens
  inside a timed call.
- **Timer**: from the moment the client holds the records to the callback that tells the
  application they are acknowledged, as ``Message.latency()`` runs from ``produce()``
  accepting a record to its delivery report. A wait for room in the window comes before
  the clock starts, as librdkafka's ``BufferError`` retry does.
- **CPU**: each worker's user + system seconds over its wall seconds (every thread), so a
  row limited by its load generator shows it (``bench.common.client_cpu``).

Results have ``kafka.produce_worker``'s shape, so ``kafka.summarise_produce`` merges them.
"""

# Optional dependencies (the bench extra) load lazily.
# ruff: noqa: PLC0415

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol

from tidelog.bench.common import ProcessCpu, window

Clock = Callable[[], float]

#: What each peer row's latency runs from and to (recorded in the row as ``timer``).
NATS_TIMER: Final = "publish_async called with room in the window -> PubAck future done"
RABBIT_SUB_ENTRY_TIMER: Final = (
    "send_sub_entry returned (the entry is in rstream's send buffer) -> publish confirm"
)
RABBIT_BATCH_TIMER: Final = "send_batch called with room in the window -> publish confirm"


class InFlight:
    """Records handed to a client and not yet acknowledged, held to ``limit`` records, and
    the latency of each acknowledged one from the time its sender stamped (``clock``)."""

    def __init__(self, limit: int, clock: Clock = time.perf_counter) -> None:
        self.limit = limit
        self.clock = clock
        self.outstanding = 0
        self.latencies: array[float] = array("d")
        self.errors = 0
        self.first_errors: list[str] = []
        self._room = asyncio.Event()

    async def admit(self, records: int) -> None:
        """Wait until ``records`` more fit in the window (a batch larger than the whole
        window goes alone), then count them as outstanding."""
        while self.outstanding and self.outstanding + records > self.limit:
            self._room.clear()
            await self._room.wait()
        self.outstanding += records

    def acked(self, enqueued: float, records: int = 1) -> None:
        latency = self.clock() - enqueued
        self.latencies.extend([latency] * records)
        self._release(records)

    def failed(self, reason: str, records: int = 1) -> None:
        self.errors += records
        if len(self.first_errors) < 3:
            self.first_errors.append(reason)
        self._release(records)

    def _release(self, records: int) -> None:
        self.outstanding -= records
        self._room.set()

    async def drain(self, timeout_s: float) -> None:
        """Wait until every admitted record is acknowledged or failed, ``timeout_s`` at most."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.outstanding > 0:
                    self._room.clear()
                    await self._room.wait()

    def result(
        self, sent: int, elapsed: float, cpu_s: float, size: int, timer: str
    ) -> dict[str, Any]:
        """A worker's result in ``kafka.produce_worker``'s shape."""
        return {
            "sent": sent,
            "acked": len(self.latencies),
            "errors": self.errors,
            "first_errors": self.first_errors,
            "unflushed": self.outstanding,
            "elapsed": elapsed,
            "cpu_s": cpu_s,
            "latencies": self.latencies.tobytes(),
            "window": window(size),
            "timer": timer,
        }


# --- NATS JetStream (nats-py) --------------------------------------------------------------


class JetStreamPublisher(Protocol):
    """What the NATS send loop uses of nats-py's ``JetStreamContext``."""

    async def publish_async(self, subject: str, payload: bytes) -> asyncio.Future[Any]: ...


async def nats_send_for(
    js: JetStreamPublisher, subject: str, payload: bytes, seconds: float, flight: InFlight
) -> int:
    """``publish_async`` for ``seconds`` under ``flight``'s window; returns records sent.
    The clock starts once the window has room, right before the call: the call appends the
    message to nats-py's pending buffer before anything in it can wait."""
    clock = flight.clock
    stop = clock() + seconds
    sent = 0
    while clock() < stop:
        await flight.admit(1)
        enqueued = clock()
        future = await js.publish_async(subject, payload)
        future.add_done_callback(functools.partial(_nats_done, flight, enqueued))
        sent += 1
    return sent


def _nats_done(flight: InFlight, enqueued: float, future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        flight.failed("cancelled")
    elif (exc := future.exception()) is not None:
        flight.failed(repr(exc))
    else:
        flight.acked(enqueued)


def nats_publish_worker(url: str, subject: str, size: int, seconds: float) -> dict[str, Any]:
    """publish_async for ``seconds``; results in the Kafka producer worker's shape."""
    import uvloop

    return uvloop.run(_nats_publish(url, subject, size, seconds))


async def _nats_publish(url: str, subject: str, size: int, seconds: float) -> dict[str, Any]:
    import nats

    limit = window(size)["records"]
    nc = await nats.connect(url)
    # nats-py releases its own slot in a done callback that runs before ours, so at the
    # window's size its semaphore never holds a publish back.
    js = nc.jetstream(publish_async_max_pending=limit, timeout=60)
    flight = InFlight(limit)
    cpu = ProcessCpu()
    start = flight.clock()
    sent = await nats_send_for(js, subject, os.urandom(size), seconds, flight)
    await flight.drain(120)
    elapsed = flight.clock() - start
    result = flight.result(sent, elapsed, cpu.seconds(), size, NATS_TIMER)
    await nc.close()
    return result


# --- RabbitMQ Streams (rstream) --------------------------------------------------------------


class StreamProducer(Protocol):
    """What the RabbitMQ send loop uses of rstream's ``Producer``."""

    async def send_sub_entry(
        self, stream: str, sub_entry_messages: list[bytes], *, on_publish_confirm: Any
    ) -> Any: ...

    async def send_batch(
        self, stream: str, batch: list[bytes], *, on_publish_confirm: Any
    ) -> Any: ...


#: Records per rstream call: sub-entries of 100 for small records, frames of 10 for large.
SUB_ENTRY_MAX_BYTES: Final = 4096


def rabbit_per_call(size: int) -> int:
    return 100 if size <= SUB_ENTRY_MAX_BYTES else 10


async def rabbit_send_for(
    producer: StreamProducer, stream: str, payload: bytes, seconds: float, flight: InFlight
) -> int:
    """Send for ``seconds`` under ``flight``'s window; returns records sent.

    Records up to ``SUB_ENTRY_MAX_BYTES`` go as sub-entries of 100 (one confirm per entry):
    ``send_sub_entry`` first waits for the lock of rstream's send buffer, which its flush
    task holds while it writes, then appends the entry; the clock starts when it returns.
    rstream 1.1 writes buffered entries from a task that wakes every 0.5 s, so their
    latency includes that wait, as librdkafka's includes ``linger.ms``. Larger records go
    in ``send_batch`` frames of 10 (one confirm per record), written by the call itself:
    the clock starts when it is called. Confirms arrive in publishing order, so each takes
    the oldest stamp."""
    per_call = rabbit_per_call(size=len(payload))
    sub_entry = len(payload) <= SUB_ENTRY_MAX_BYTES
    per_confirm = per_call if sub_entry else 1
    stamps: deque[float] = deque()

    def on_confirm(status: Any) -> None:
        enqueued = stamps.popleft()
        if status.is_confirmed:
            flight.acked(enqueued, per_confirm)
        else:
            flight.failed(f"response code {status.response_code}", per_confirm)

    clock = flight.clock
    stop = clock() + seconds
    sent = 0
    batch = [payload] * per_call
    while clock() < stop:
        await flight.admit(per_call)
        if sub_entry:
            await producer.send_sub_entry(stream, batch, on_publish_confirm=on_confirm)
            stamps.append(clock())
        else:
            stamps.extend([clock()] * per_call)
            await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
        sent += per_call
    return sent


def rabbit_publish_worker(port: int, stream: str, size: int, seconds: float) -> dict[str, Any]:
    import uvloop

    return uvloop.run(_rabbit_publish(port, stream, size, seconds))


async def _rabbit_publish(port: int, stream: str, size: int, seconds: float) -> dict[str, Any]:
    from rstream import Producer

    flight = InFlight(window(size)["records"])
    sub_entry = size <= SUB_ENTRY_MAX_BYTES
    timer = RABBIT_SUB_ENTRY_TIMER if sub_entry else RABBIT_BATCH_TIMER
    async with Producer(
        "127.0.0.1", port, username="guest", password="guest", frame_max=8 << 20
    ) as producer:
        cpu = ProcessCpu()
        start = flight.clock()
        sent = await rabbit_send_for(producer, stream, os.urandom(size), seconds, flight)
        await flight.drain(120)
        elapsed = flight.clock() - start
        return flight.result(sent, elapsed, cpu.seconds(), size, timer)
