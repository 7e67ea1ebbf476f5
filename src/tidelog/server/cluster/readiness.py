"""Whether a broker in a cluster may answer its clients yet.

Theory of operation:

1. A broker answers clients from the metadata view the controller gave it (UpdateMetadata,
   ``ClusterMetadataCache``). A broker that has just started, or whose ZooKeeper session
   expired, has no such view for its current registration: its cache is empty (or
   stale), and an answer from it is a guess. An empty cache says "unknown topic" for a
   topic that exists; librdkafka then sets the topic's partition count to 0, fails every
   queued message with ``_UNKNOWN_TOPIC`` and ``produce()`` raises. The application stops,
   although the topic is healthy.
2. So the gate is *open* only when both hold: the broker is registered in ZooKeeper with
   broker epoch E (``registered``), and it has applied an UpdateMetadata the controller
   addressed to epoch E (``applied_update_metadata``; an UpdateMetadata with no broker
   epoch, -1, counts for any). The controller sends a broker that starts, or bounces (a new
   registration), everything it knows, so that first UpdateMetadata is a whole view.
   Kafka 4's brokers likewise stay fenced until they have caught up with the metadata log
   (KIP-631), and a Kafka 2.x broker processes requests only after its registration.
3. The gate closes again when the ZooKeeper session expires (``session_expired``): the
   broker registers anew with a new epoch and waits for the controller's view of it.
4. While the gate is closed, ApiVersions, the requests to the controller (ControlledShutdown,
   AlterPartition) and the replicas' own Fetch and OffsetForLeaderEpoch pass: they do not
   read the metadata view. The controller's requests (LeaderAndIsr, UpdateMetadata,
   StopReplica; the UpdateMetadata that opens the gate is one of them) wait only for the
   registration: then the broker knows its broker epoch and refuses one addressed to an
   earlier incarnation of itself with STALE_BROKER_EPOCH (KIP-380), as the controller's
   queue to the killed process goes on delivering to the new one on the same port. Every
   other request is *held*: it runs when the gate opens. One still held after ``hold_s``
   closes its connection (a disconnect is retriable for every client: it asks another
   broker), never an answer made from a view the broker does not have.
5. Order per connection (network rule 3): held requests run in arrival order when what
   they wait for holds, synchronously, and once a connection has a request held every
   later request on it is held too (even one that would pass), so no request overtakes an
   earlier one on its connection.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.apis import ApiKey
from tidelog.server.network.connection import CloseConnection

log = logging.getLogger(__name__)

#: Rule 4: requests that never wait for the gate.
PASS_THROUGH = frozenset({ApiKey.API_VERSIONS, ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION})
#: Rule 4: the controller's requests, which wait for the registration only.
CONTROL_PLANE = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA})
#: Rule 4: requests that pass when a replica (replica id >= 0) sends them.
REPLICA_APIS = frozenset({ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH})


class Need(enum.IntEnum):
    """What a request waits for (rule 4)."""

    NOTHING = 0
    REGISTRATION = 1
    READY = 2


def need_of(api_key: int, body: Any) -> Need:
    if api_key in PASS_THROUGH:
        return Need.NOTHING
    if api_key in CONTROL_PLANE:
        return Need.REGISTRATION
    if api_key in REPLICA_APIS and replica_id_of(body) >= 0:
        return Need.NOTHING
    return Need.READY


class NotReadyError(CloseConnection):
    """A held request's time ran out (rule 4): the dispatcher closes its connection."""


def replica_id_of(body: Any) -> int:
    """The replica id of a Fetch / OffsetForLeaderEpoch body (-1 for a consumer). Fetch
    carries it inside ``replica_state`` from v15 (KIP-903), at the top level before."""
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


@dataclass(slots=True)
class _Held:
    conn: object
    need: Need
    run: Callable[[], None]
    fail: Callable[[NotReadyError], None]
    deadline: float
    done: Callable[[], bool]


class ReadinessGate:
    """See the module docstring. Lives on the event loop; no locks."""

    def __init__(self, broker_id: int, hold_s: float) -> None:
        self.broker_id = broker_id
        self.hold_s = hold_s
        #: Rule 2: the broker epoch of the current registration (-1: not registered).
        self.broker_epoch = -1
        #: Rule 2: the broker epochs UpdateMetadata requests applied were addressed to. A
        #: set, not the last one: a request queued for an earlier incarnation may still
        #: arrive late and must not close the gate again.
        self._metadata_epochs: set[int] = set()
        self._held: collections.deque[_Held] = collections.deque()
        self._held_per_conn: collections.Counter[int] = collections.Counter()
        self._timer: asyncio.TimerHandle | None = None
        self._closed_since = time.monotonic()
        #: Requests held since the gate last closed (for the log line when it opens).
        self._held_count = 0

    # -- state (rules 2, 3) -------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        epochs = self._metadata_epochs
        return self.broker_epoch >= 0 and (self.broker_epoch in epochs or -1 in epochs)

    def registered(self, broker_epoch: int) -> None:
        was_open = self.is_open
        self.broker_epoch = broker_epoch
        self._changed(was_open, f"registered with broker epoch {broker_epoch}")

    def applied_update_metadata(self, broker_epoch: int) -> None:
        was_open = self.is_open
        self._metadata_epochs.add(broker_epoch)
        self._changed(was_open, f"UpdateMetadata for broker epoch {broker_epoch} applied")

    def session_expired(self) -> None:
        was_open = self.is_open
        self.broker_epoch = -1
        self._metadata_epochs.clear()
        self._changed(was_open, "ZooKeeper session expired")

    def _satisfied(self, need: Need) -> bool:
        if need is Need.READY:
            return self.is_open
        return need is Need.NOTHING or self.broker_epoch >= 0

    def _changed(self, was_open: bool, why: str) -> None:
        if self._held:
            self._release()
        if was_open and not self.is_open:
            self._closed_since = time.monotonic()
            self._held_count = 0
            log.info(
                "broker %d: not serving clients until the controller's metadata comes (%s)",
                self.broker_id,
                why,
            )
        elif not was_open and self.is_open:
            log.info(
                "broker %d: serving clients (%s; %d request(s) held over %.1f s)",
                self.broker_id,
                why,
                self._held_count,
                time.monotonic() - self._closed_since,
            )

    # -- requests (rules 4, 5) ----------------------------------------------------------

    def must_hold(self, conn: object, api_key: int, body: Any) -> bool:
        if not self._held and self.is_open:
            return False  # serving, nothing held: every request of a running broker
        if self._held_per_conn[id(conn)]:
            return True  # rule 5: nothing overtakes a held request on its connection
        return not self._satisfied(need_of(api_key, body))

    def hold(
        self,
        conn: object,
        api_key: int,
        body: Any,
        *,
        run: Callable[[], None],
        fail: Callable[[NotReadyError], None],
        done: Callable[[], bool],
    ) -> None:
        """Run ``run`` when what the request waits for holds, or ``fail`` after ``hold_s``
        (rule 4). ``done`` says it no longer needs either (its connection closed)."""
        need = need_of(api_key, body)
        entry = _Held(conn, need, run, fail, time.monotonic() + self.hold_s, done)
        self._held.append(entry)
        self._held_per_conn[id(conn)] += 1
        self._held_count += 1
        if self._timer is None:
            self._schedule()

    def _forget(self, entry: _Held) -> None:
        key = id(entry.conn)
        self._held_per_conn[key] -= 1
        if self._held_per_conn[key] <= 0:
            del self._held_per_conn[key]

    def _release(self) -> None:
        """Rule 5: every held request whose wait is over, in arrival order, unless one
        before it on its connection still waits."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, collections.deque()
        blocked: set[int] = set()
        for entry in held:
            key = id(entry.conn)
            if entry.done():
                self._forget(entry)
            elif key in blocked or not self._satisfied(entry.need):
                blocked.add(key)
                self._held.append(entry)
            else:
                self._forget(entry)
                entry.run()
        self._schedule()

    def _schedule(self) -> None:
        if not self._held:
            self._timer = None
            return
        delay = max(0.0, self._held[0].deadline - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        """Held requests whose time ran out (deadlines grow along the queue) fail."""
        now = time.monotonic()
        while self._held and (self._held[0].deadline <= now or self._held[0].done()):
            entry = self._held.popleft()
            self._forget(entry)
            if not entry.done():
                entry.fail(
                    NotReadyError(
                        f"broker {self.broker_id} has not received the cluster's metadata "
                        f"after {self.hold_s:.0f} s (broker epoch {self.broker_epoch})"
                    )
                )
        self._schedule()

    def close(self) -> None:
        """The broker stops: held requests are dropped with their connections."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._held.clear()
        self._held_per_conn.clear()


__all__ = [
    "CONTROL_PLANE",
    "PASS_THROUGH",
    "REPLICA_APIS",
    "Need",
    "NotReadyError",
    "ReadinessGate",
    "need_of",
    "replica_id_of",
]
