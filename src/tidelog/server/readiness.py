"""Whether a broker in a cluster may answer its clients yet (issue 18).

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
4. While the gate is closed, the control plane (ApiVersions, LeaderAndIsr, UpdateMetadata,
   StopReplica, ControlledShutdown, AlterPartition) and the replicas' own Fetch and
   OffsetForLeaderEpoch pass (``passes``): they do not read the metadata view, and the
   UpdateMetadata that opens the gate is one of them. Every other request is *held*: it
   runs when the gate opens. One still held after ``hold_s`` closes its connection (a
   disconnect is retriable for every client: it asks another broker), never an answer made
   from a view the broker does not have.
5. Order per connection (network rule 3): held requests run in arrival order when the gate
   opens, all at once and synchronously, and once a connection has a request held every
   later request on it is held too (even one that would pass), so no request overtakes an
   earlier one on its connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.apis import ApiKey
from tidelog.server.network import CloseConnection

log = logging.getLogger(__name__)

#: Rule 4: requests that never wait for the gate.
PASS_THROUGH = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.LEADER_AND_ISR,
        ApiKey.UPDATE_METADATA,
        ApiKey.STOP_REPLICA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
    }
)
#: Rule 4: requests that pass when a replica (replica id >= 0) sends them.
REPLICA_APIS = frozenset({ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH})


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

    def _changed(self, was_open: bool, why: str) -> None:
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
            self._release()

    # -- requests (rules 4, 5) ----------------------------------------------------------

    def must_hold(self, conn: object, api_key: int, body: Any) -> bool:
        if self._held_per_conn[id(conn)]:
            return True  # rule 5: nothing overtakes a held request on its connection
        if self.is_open or api_key in PASS_THROUGH:
            return False
        return not (api_key in REPLICA_APIS and replica_id_of(body) >= 0)

    def hold(
        self,
        conn: object,
        run: Callable[[], None],
        fail: Callable[[NotReadyError], None],
        done: Callable[[], bool],
    ) -> None:
        """Run ``run`` when the gate opens, or ``fail`` after ``hold_s`` (rule 4).
        ``done`` says the request no longer needs either (its connection closed)."""
        entry = _Held(conn, run, fail, time.monotonic() + self.hold_s, done)
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
        """Rule 5: every held request, in arrival order, now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, collections.deque()
        self._held_per_conn.clear()
        for entry in held:
            if not entry.done():
                entry.run()

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


__all__ = ["PASS_THROUGH", "REPLICA_APIS", "NotReadyError", "ReadinessGate", "replica_id_of"]
