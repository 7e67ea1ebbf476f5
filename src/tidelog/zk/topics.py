"""Topic assignments and partition states on ZooKeeper (Kafka's ``KafkaZkClient``).

Partition states are only written with compare-and-set on the state znode's version (the
partition epoch), fenced by the controller seat (``tidelog.zk.brokers``). A lost race is a
returned ``StateWriteOutcome``, never an exception.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
)

from tidelog.model import PartitionEpoch, TopicPartition
from tidelog.zk import znodes
from tidelog.zk.brokers import ControllerSeat
from tidelog.zk.errors import ZkError
from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import (
    PartitionState,
    TopicAssignment,
)

log = logging.getLogger(__name__)


class StateWriteOutcome(enum.Enum):
    """The result of one compare-and-set write of a partition state znode."""

    #: Written; the result carries the new state with its new partition epoch.
    UPDATED = "updated"
    #: The znode's version was not the expected partition epoch (someone wrote first).
    BAD_VERSION = "bad_version"
    #: The znode does not exist (update) or already exists (create).
    NO_NODE = "no_node"
    NODE_EXISTS = "node_exists"
    #: ``/controller_epoch`` moved on: we are no longer the controller; nothing was written.
    CONTROLLER_MOVED = "controller_moved"


@dataclass(frozen=True, slots=True)
class StateWriteResult:
    outcome: StateWriteOutcome
    #: On UPDATED: what is now in ZooKeeper, ``partition_epoch`` = the znode's new version.
    state: PartitionState | None = None


class TopicCreateOutcome(enum.Enum):
    CREATED = "created"
    ALREADY_EXISTS = "already_exists"


#: Partition-state writes per ZooKeeper multi-op (each ~150 bytes of JSON; far below
#: jute.maxbuffer's 1 MiB).
_STATE_WRITES_PER_MULTI: Final = 100


class TopicZnodes(ZkSession):
    """Topics (``/brokers/topics``) and their partition states on one session."""

    async def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> Watch:
        return await self.watch_children(
            znodes.TOPICS_PATH, lambda names: callback(frozenset(names))
        )

    async def watch_topic(
        self, topic: str, callback: Callable[[TopicAssignment | None], None]
    ) -> Watch:
        """One topic's assignment (partition additions, reassignments), now and on change."""

        def decode(data: bytes | None, _version: int) -> None:
            callback(None if data is None else TopicAssignment.decode(topic, data))

        return await self.watch_data(znodes.topic_path(topic), decode)

    # -- topics -------------------------------------------------------------------------------

    async def get_topics(self) -> frozenset[str]:
        names = await self._call(self._kz.retry, self._kz.get_children, znodes.TOPICS_PATH)
        return frozenset(names)

    async def get_topic_assignments(
        self, topics: Iterable[str]
    ) -> dict[str, tuple[TopicAssignment, int]]:
        """(assignment, znode version) per existing topic, read in one pipeline."""
        paths = {topic: znodes.topic_path(topic) for topic in topics}

        def run() -> dict[str, tuple[TopicAssignment, int]]:
            pending = {topic: self._kz.get_async(path) for topic, path in paths.items()}
            out: dict[str, tuple[TopicAssignment, int]] = {}
            for topic, result in pending.items():
                try:
                    data, stat = result.get()
                except NoNodeError:
                    continue
                out[topic] = (TopicAssignment.decode(topic, data), int(stat.version))
            return out

        # Reads are idempotent: the whole pipeline is retried across a connection loss.
        return await self._call(self._kz.retry, run)

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        found = await self.get_topic_assignments([topic])
        return found[topic][0] if topic in found else None

    async def create_topic(
        self, topic: str, assignment: TopicAssignment, config: Mapping[str, str]
    ) -> TopicCreateOutcome:
        """Kafka's ``AdminZkClient.createTopicWithAssignment``: config first, then assignment.

        The controller notices the new ``/brokers/topics`` child and creates the partition
        states. ``topic`` must be a legal name (``znodes.topic_name_error``).
        """
        if (reason := znodes.topic_name_error(topic)) is not None:
            raise ValueError(reason)

        def run() -> TopicCreateOutcome:
            kz = self._kz
            if kz.retry(kz.exists, znodes.topic_path(topic)) is not None:
                return TopicCreateOutcome.ALREADY_EXISTS
            config_path = znodes.topic_config_path(topic)
            config_data = znodes.encode_topic_config(config)
            try:
                kz.retry(kz.create, config_path, config_data, makepath=True)
            except NodeExistsError:
                kz.retry(kz.set, config_path, config_data)
            try:
                kz.retry(kz.create, znodes.topic_path(topic), assignment.encode(), makepath=True)
            except NodeExistsError:
                return TopicCreateOutcome.ALREADY_EXISTS
            return TopicCreateOutcome.CREATED

        return await self._call(run)

    async def set_topic_assignment(
        self,
        topic: str,
        assignment: TopicAssignment,
        expected_version: int,
        seat: ControllerSeat | None = None,
    ) -> bool:
        """CAS-update a topic's assignment (e.g. to add its topic id); False on a lost race."""

        def run() -> bool:
            def build(tx: Any) -> None:
                if seat is not None:
                    tx.check(znodes.CONTROLLER_EPOCH_PATH, seat.epoch_zk_version)
                tx.set_data(znodes.topic_path(topic), assignment.encode(), expected_version)

            results = self._commit(build)
            return not any(isinstance(r, Exception) for r in results)

        return await self._call(run)

    # -- partition states ---------------------------------------------------------------------

    async def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, PartitionState]:
        """The state of each partition that has one; partition_epoch = the znode's version."""
        tps = list(partitions)

        def run() -> dict[TopicPartition, PartitionState]:
            pending = {
                tp: self._kz.get_async(znodes.partition_state_path(tp.topic, tp.partition))
                for tp in tps
            }
            out: dict[TopicPartition, PartitionState] = {}
            for tp, result in pending.items():
                try:
                    data, stat = result.get()
                except NoNodeError:
                    continue
                out[tp] = PartitionState.decode(
                    data, zk_version=int(stat.version), zk_mzxid=int(stat.mzxid), what=str(tp)
                )
            return out

        # Reads are idempotent: the whole pipeline is retried across a connection loss.
        return await self._call(self._kz.retry, run)

    async def create_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], seat: ControllerSeat
    ) -> dict[TopicPartition, StateWriteResult]:
        """Create the initial state znodes (partition epoch 0), fenced by the controller seat.

        The topic's ``/brokers/topics/<t>`` must exist (NO_NODE otherwise); an existing state
        is NODE_EXISTS.
        """

        def run() -> dict[TopicPartition, StateWriteResult]:
            # Parents first (Kafka's createTopicPartitions), pipelined; they may exist.
            parents: dict[str, Any] = {}
            for tp in states:
                for parent in (
                    znodes.partitions_path(tp.topic),
                    znodes.partition_path(tp.topic, tp.partition),
                ):
                    if parent not in parents:
                        parents[parent] = self._kz.create_async(parent, b"")
            missing: set[str] = set()
            for parent, result in parents.items():
                try:
                    result.get()
                except NodeExistsError:
                    pass
                except NoNodeError:
                    missing.add(parent)
            out = {
                tp: StateWriteResult(StateWriteOutcome.NO_NODE)
                for tp in states
                if znodes.partition_path(tp.topic, tp.partition) in missing
            }

            def op(tx: Any, tp: TopicPartition, state: PartitionState) -> None:
                tx.create(znodes.partition_state_path(tp.topic, tp.partition), state.encode())

            todo = {tp: state for tp, state in states.items() if tp not in out}
            out.update(self._write_states_blocking(todo, seat, op, True))
            return out

        return await self._call(run)

    async def update_partition_states(
        self, states: Mapping[TopicPartition, PartitionState], seat: ControllerSeat
    ) -> dict[TopicPartition, StateWriteResult]:
        """Compare-and-set each state znode: expected version = the state's partition_epoch.

        Each write is its own multi-op (controller-epoch check + setData), all pipelined; one
        partition's lost race does not fail the others.
        """

        def op(tx: Any, tp: TopicPartition, state: PartitionState) -> None:
            tx.set_data(
                znodes.partition_state_path(tp.topic, tp.partition),
                state.encode(),
                int(state.partition_epoch),
            )

        return await self._call(self._write_states_blocking, states, seat, op, False)

    def _write_states_blocking(
        self,
        states: Mapping[TopicPartition, PartitionState],
        seat: ControllerSeat,
        add_op: Callable[[Any, TopicPartition, PartitionState], None],
        create: bool,
    ) -> dict[TopicPartition, StateWriteResult]:
        """Up to ``_STATE_WRITES_PER_MULTI`` partitions per multi-op (one controller-epoch
        check + their writes), all pipelined. A multi-op is all or nothing, so a batch where
        one compare-and-set lost (or whose outcome a lost connection hides) is written again
        one partition per multi-op, which tells each partition's outcome apart. Measured on
        the 2-CPU VM against Debian's ZooKeeper at load 6: 1,000 state writes took 1.5-2.0 s
        as 1,000 pipelined multi-ops and 0.15-0.4 s in batches of 50-200."""
        if len(states) <= 1:
            return self._write_states_one_by_one(states, seat, add_op, create)
        tps = list(states)
        pending: list[tuple[list[TopicPartition], Any]] = []
        for start in range(0, len(tps), _STATE_WRITES_PER_MULTI):
            chunk = tps[start : start + _STATE_WRITES_PER_MULTI]
            tx = self._kz.transaction()
            tx.check(znodes.CONTROLLER_EPOCH_PATH, seat.epoch_zk_version)
            for tp in chunk:
                add_op(tx, tp, states[tp])
            pending.append((chunk, tx.commit_async()))
        out: dict[TopicPartition, StateWriteResult] = {}
        one_by_one: dict[TopicPartition, PartitionState] = {}
        for chunk, result in pending:
            try:
                check, *writes = result.get()
            except (ConnectionLoss, OperationTimeoutError):
                one_by_one.update((tp, states[tp]) for tp in chunk)
                continue
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                out.update(
                    (tp, StateWriteResult(StateWriteOutcome.CONTROLLER_MOVED)) for tp in chunk
                )
            elif any(isinstance(w, Exception) for w in writes):
                one_by_one.update((tp, states[tp]) for tp in chunk)
            else:
                for tp, write in zip(chunk, writes, strict=True):
                    new_epoch = PartitionEpoch(0 if create else int(write.version))
                    out[tp] = StateWriteResult(
                        StateWriteOutcome.UPDATED, replace(states[tp], partition_epoch=new_epoch)
                    )
        if one_by_one:
            out.update(self._write_states_one_by_one(one_by_one, seat, add_op, create))
        return out

    def _write_states_one_by_one(
        self,
        states: Mapping[TopicPartition, PartitionState],
        seat: ControllerSeat,
        add_op: Callable[[Any, TopicPartition, PartitionState], None],
        create: bool,
    ) -> dict[TopicPartition, StateWriteResult]:
        def build_for(tp: TopicPartition) -> Callable[[Any], None]:
            def build(tx: Any) -> None:
                tx.check(znodes.CONTROLLER_EPOCH_PATH, seat.epoch_zk_version)
                add_op(tx, tp, states[tp])

            return build

        pending: dict[TopicPartition, Any] = {}
        for tp in states:
            tx = self._kz.transaction()
            build_for(tp)(tx)
            pending[tp] = tx.commit_async()
        out: dict[TopicPartition, StateWriteResult] = {}
        for tp, result in pending.items():
            try:
                check, write = result.get()
            except (ConnectionLoss, OperationTimeoutError):
                # Retried on its own. If the lost attempt had been applied, the retry answers
                # BAD_VERSION / NODE_EXISTS: callers re-read and decide again, which is safe.
                check, write = self._commit(build_for(tp))
            state = states[tp]
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                outcome = StateWriteOutcome.CONTROLLER_MOVED
            elif isinstance(write, BadVersionError):
                outcome = StateWriteOutcome.BAD_VERSION
            elif isinstance(write, NoNodeError):
                outcome = StateWriteOutcome.NO_NODE
            elif isinstance(write, NodeExistsError):
                outcome = StateWriteOutcome.NODE_EXISTS
            elif isinstance(write, Exception):
                raise ZkError(f"writing the state of {tp} failed: {write!r}")
            else:
                new_epoch = PartitionEpoch(0 if create else int(write.version))
                out[tp] = StateWriteResult(
                    StateWriteOutcome.UPDATED, replace(state, partition_epoch=new_epoch)
                )
                continue
            out[tp] = StateWriteResult(outcome)
        return out
