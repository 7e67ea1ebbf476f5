"""The simulator's event loop: one seeded random stream, a simulated clock, an event queue,
and the network between brokers, clients and the controller (delays, drops, partitions);
plus the state of the run that the broker and controller models share
(``tidelog.testing.sim``)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from tidelog.controller.decisions import ReplicaAssignment
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.replication.partition import LeaderAndIsr
from tidelog.testing.invariants import InvariantChecker
from tidelog.testing.sim_types import SimBroker, SimConfig, Stats


class SimCore:
    """The state of one run (brokers, the controller's znodes, the clients') and its event
    loop: the simulated clock, the event queue and the network."""

    def __init__(self, config: SimConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self._queue: list[tuple[int, int, Callable[..., object], tuple[object, ...]]] = []
        self._seq = 0
        self._request_ids = 0
        self._link_clock: dict[int, int] = {}
        self.blocked: set[tuple[int, int]] = set()
        #: Scripted faults: the next N AlterPartition answers are lost (applied, never heard).
        self.lose_alter_responses = 0
        self.checker = InvariantChecker()
        self.stats = Stats()
        self.trace: list[str] = []
        self.tracing = False
        self.brokers = {
            BrokerId(i): SimBroker(broker_id=BrokerId(i)) for i in range(config.brokers)
        }
        # --- controller state (ZooKeeper's znodes) ---
        self.live: set[BrokerId] = set(self.brokers)
        # broker -> broker epoch of its current registration (KIP-380)
        self.broker_epochs: dict[BrokerId, int] = dict.fromkeys(self.brokers, 0)
        self._registrations = 0
        #: The replica set RS (during a reassignment TRS + ORS, target first).
        self.assignment: dict[TopicPartition, tuple[BrokerId, ...]] = {}
        #: Reassignments in progress: RS with its adding and removing replicas.
        self.reassignments: dict[TopicPartition, ReplicaAssignment] = {}
        #: The last target each partition was given (initially its assignment): what the
        #: assignment must equal once the run settles.
        self.targets: dict[TopicPartition, tuple[BrokerId, ...]] = {}
        #: Brokers in a controlled shutdown (rule 12): live but not electable.
        self.shutting_down: set[BrokerId] = set()
        #: Scripted fault: the next N completions lose the controller between their two
        #: writes (partition state written, assignment not); a failover follows.
        self.crash_controller_mid_completion = 0
        #: Scripted fault: the next N completions lose the controller after both writes,
        #: before any LeaderAndIsr or StopReplica went out; a failover follows.
        self.crash_controller_after_assignment = 0
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.next_record_id = 1
        self.outcomes: dict[int, ErrorCode] = {}  # record id -> the producer's answer
        self.consumer_positions: dict[TopicPartition, int] = {}

    # ---- infrastructure -------------------------------------------------------------

    def log(self, message: str) -> None:
        if self.tracing:
            self.trace.append(f"{self.now_ms:>6} {message}")

    def schedule(self, at_ms: int, fn: Callable[..., object], *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at_ms, self._seq, fn, args))

    def to_broker(
        self, at_ms: int, broker: BrokerId, fn: Callable[..., None], *args: object
    ) -> None:
        """Schedule ``fn(*args)`` on ``broker``'s current incarnation only."""
        b = self.brokers[broker]
        self.schedule(at_ms, self._on_broker, broker, b.incarnation, fn, args)

    def _on_broker(
        self,
        broker: BrokerId,
        incarnation: int,
        fn: Callable[..., None],
        args: tuple[object, ...],
    ) -> None:
        b = self.brokers[broker]
        if not b.alive or b.incarnation != incarnation:
            return
        if b.paused_until > self.now_ms:
            b.backlog.append((fn, args))
            return
        fn(*args)

    def send(self, src: int, dst: BrokerId, fn: Callable[..., None], *args: object) -> None:
        """Broker-to-broker or client-to-broker message: delay, drops, partitions."""
        if (src, dst) in self.blocked:
            return
        c = self.config
        if c.net_drop_rate and self.rng.random() < c.net_drop_rate:
            return
        lo, hi = c.net_delay_ms
        self.to_broker(self.now_ms + self.rng.randint(lo, hi), dst, fn, *args)

    def from_controller(self, dst: BrokerId, fn: Callable[..., None], *args: object) -> None:
        """Controller-to-broker: reliable, FIFO per broker, delayed."""
        lo, hi = self.config.controller_delay_ms
        at = max(self.now_ms + self.rng.randint(lo, hi), self._link_clock.get(dst, 0))
        self._link_clock[dst] = at
        self.to_broker(at, dst, fn, *args)

    def to_controller(self, fn: Callable[..., None], *args: object) -> None:
        lo, hi = self.config.controller_delay_ms
        self.schedule(self.now_ms + self.rng.randint(lo, hi), fn, *args)

    def step(self) -> bool:
        if not self._queue:
            return False
        at, _, fn, args = heapq.heappop(self._queue)
        self.now_ms = max(self.now_ms, at)
        fn(*args)
        self.stats.events += 1
        return True

    def run_until(self, t_ms: int) -> None:
        while self._queue and self._queue[0][0] <= t_ms:
            self.step()
        self.now_ms = max(self.now_ms, t_ms)

    def run_for(self, ms: int) -> None:
        self.run_until(self.now_ms + ms)

    def run_until_true(self, predicate: Callable[[], bool], limit_ms: int) -> bool:
        end = self.now_ms + limit_ms
        while not predicate():
            if not self._queue or self._queue[0][0] > end:
                self.now_ms = max(self.now_ms, end)
                return predicate()
            self.step()
        return True
