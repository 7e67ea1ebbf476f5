"""DescribeLogDirs (35) and AlterReplicaLogDirs (34) on one broker with two log dirs
(``tidelog.server.apis.log_dir_apis`` and ``tidelog.server.replica.alter_log_dirs``): sizes and
lags, errors as Kafka answers them, the cluster ACL checks, moves that run while the
partition keeps taking produces, and moves resumed after a crash or a clean restart."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_request_schema

from tidelog.client.records import Record, build_batch, decode_records
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from tidelog.protocol.codec import RequestHeader, encode_response
from tidelog.protocol.messages import build
from tidelog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.apis.kafka_apis import KafkaApis
from tidelog.server.apis.log_dir_apis import LOG_DIR_API_VERSIONS, LogDirApis
from tidelog.server.auth.authorizer import AclAuthorizer, InMemoryAclStore
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.metadata.local import MetadataStore
from tidelog.server.metadata.local_backend import LocalBackend
from tidelog.server.network.request_context import RequestContext, set_request
from tidelog.server.replica.alter_log_dirs import ReplicaAlterLogDirsManager
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.reads import PartitionRead
from tidelog.storage.future_log import FutureLogCopier
from tidelog.storage.log_manager import LogManager

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)


@dataclass
class Node:
    apis: KafkaApis
    mover: ReplicaAlterLogDirsManager
    handlers: dict[int, Callable[[RequestHeader, Any], Any]]
    dirs: tuple[Path, Path]

    @property
    def rm(self) -> ReplicaManager:
        return self.apis.replica_manager

    def produce(self, value: bytes, tp: TopicPartition = TP) -> None:
        result = self.rm.append_records({tp: build_batch([Record(value=value)])}, acks=1)[tp]
        assert result[0].error == ErrorCode.NONE

    def values(self, tp: TopicPartition = TP) -> list[bytes]:
        out: list[bytes] = []
        offset = 0
        while True:
            got = self.rm.read([PartitionRead(tp, offset, 1 << 20)], 1 << 20)[0]
            if got.records is None:
                return out
            for rec in decode_records(got.records.read_bytes()):
                if rec.offset >= offset:
                    assert rec.value is not None
                    out.append(rec.value)
                    offset = rec.offset + 1


def make_node(tmp_path: Path, **extra: str) -> Node:
    a, b = tmp_path / "a", tmp_path / "b"
    config = load_broker_config({"log.dirs": f"{a},{b}", **extra})
    logs = LogManager([a, b], log_config_for(effective_topic_config(config, {})), now_ms=now_ms())
    apis = KafkaApis.alone(config, MetadataStore(a), ReplicaManager(config, logs), {})
    apis.create_topic(TOPIC, 2, {"segment.bytes": 4096})
    mover = ReplicaAlterLogDirsManager(config, apis.replica_manager)
    handlers = dict(LogDirApis(apis.helper, mover).handlers())
    return Node(apis, mover, handlers, (a, b))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = make_node(tmp_path)
    yield n
    n.rm.log_manager.close()


def request(node: Node, api: ApiKey, version: int, data: dict[str, Any]) -> Any:
    """The handler's answer (checked to encode) to a request built from ``data``."""
    low, high = SUPPORTED_VERSIONS[api]
    assert low <= version <= high
    body = build(load_request_schema(api, version), data)
    header = RequestHeader(int(api), version, 1, "test")
    answer = node.handlers[api](header, body)
    encode_response(header, answer)
    return answer


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coro())  # type: ignore[arg-type]


def alter(node: Node, path: str | Path, tp: TopicPartition = TP, version: int = 2) -> int:
    answer = request(
        node,
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        version,
        {
            "dirs": [
                {"path": str(path), "topics": [{"name": tp.topic, "partitions": [tp.partition]}]}
            ]
        },
    )
    [topic] = answer.results
    [partition] = topic.partitions
    assert (topic.topic_name, partition.partition_index) == (tp.topic, tp.partition)
    return int(partition.error_code)


def describe(node: Node, topics: list[dict[str, Any]] | None = None, version: int = 4) -> Any:
    return request(node, ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})


def where(node: Node, tp: TopicPartition = TP) -> dict[str, list[tuple[int, int, bool]]]:
    """log dir -> (size, offset lag, is future) of ``tp``'s logs, from DescribeLogDirs."""
    out: dict[str, list[tuple[int, int, bool]]] = {}
    for result in describe(node).results:
        for topic in result.topics:
            for p in topic.partitions:
                if (topic.name, p.partition_index) == (tp.topic, tp.partition):
                    out.setdefault(result.log_dir, []).append(
                        (p.partition_size, p.offset_lag, p.is_future_key)
                    )
    return out


def test_versions_advertised_are_the_handlers() -> None:
    for api, versions in LOG_DIR_API_VERSIONS.items():
        assert SUPPORTED_VERSIONS[api] == versions


def test_describe_lists_every_dir_with_sizes_and_space(node: Node) -> None:
    a, b = node.dirs
    node.produce(b"x" * 100)
    answer = describe(node)
    assert answer.error_code == ErrorCode.NONE
    dirs = {r.log_dir: r for r in answer.results}
    assert set(dirs) == {os.path.abspath(a), os.path.abspath(b)}
    for result in answer.results:
        assert result.error_code == ErrorCode.NONE
        stat = os.statvfs(result.log_dir)
        assert result.total_bytes == stat.f_blocks * stat.f_frsize
        assert 0 < result.usable_bytes <= result.total_bytes
    partitions = {
        (t.name, p.partition_index): (r.log_dir, p)
        for r in answer.results
        for t in r.topics
        for p in t.partitions
    }
    assert set(partitions) == {(TOPIC, 0), (TOPIC, 1)}  # one log per dir (fewest first)
    log_dir, p0 = partitions[(TOPIC, 0)]
    hosted = node.rm.partitions[TP]
    assert log_dir == os.path.abspath(hosted.log.directory.parent)
    assert p0.partition_size == hosted.log.size_bytes > 100
    assert (p0.offset_lag, p0.is_future_key) == (0, False)
    # A filter names partitions; one this broker has no log of is simply absent.
    only = describe(
        node, [{"topic": TOPIC, "partitions": [1, 7]}, {"topic": "nope", "partitions": [0]}]
    )
    assert [
        (t.name, [p.partition_index for p in t.partitions]) for r in only.results for t in r.topics
    ] == [(TOPIC, [1])]
    # v1 (no space fields, no top-level error) answers too.
    assert len(describe(node, version=1).results) == 2


def test_describe_offset_lag_of_a_follower_and_an_offline_dir(node: Node) -> None:
    for i in range(5):
        node.produce(b"%d" % i)
    hosted = node.rm.partitions[TP]
    hosted.partition.high_watermark = hosted.log.log_end_offset + 3  # a follower 3 behind
    assert where(node)[os.path.abspath(hosted.log.directory.parent)] == [
        (hosted.log.size_bytes, 3, False)
    ]
    offline = hosted.log.directory.parent
    node.rm.mark_log_dir_offline(offline, OSError(errno.EIO, "I/O error"))
    results = {r.log_dir: r for r in describe(node).results}
    assert results[os.path.abspath(offline)].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert results[os.path.abspath(offline)].topics == ()
    assert results[os.path.abspath(offline)].total_bytes == -1
    # Moves into or out of an offline dir are refused as Kafka refuses them.
    other = next(d for d in node.dirs if d != offline)
    assert alter(node, offline, TopicPartition(TOPIC, 1)) == ErrorCode.KAFKA_STORAGE_ERROR
    assert alter(node, other) == ErrorCode.KAFKA_STORAGE_ERROR


def test_alter_errors(node: Node, tmp_path: Path) -> None:
    async def inside() -> None:
        assert alter(node, tmp_path / "elsewhere") == ErrorCode.LOG_DIR_NOT_FOUND
        assert alter(node, "relative/nowhere") == ErrorCode.LOG_DIR_NOT_FOUND
        # Not hosted here (alone: the cluster does not know it either).
        assert alter(node, node.dirs[1], TopicPartition("nope", 0)) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert alter(node, node.dirs[1], TopicPartition("x" * 249, 0)) == (
            ErrorCode.INVALID_TOPIC_EXCEPTION
        )
        # Where it is already: a no-op success, nothing created.
        here = node.rm.partitions[TP].log.directory.parent
        assert alter(node, str(here) + "/") == ErrorCode.NONE
        assert not node.mover.moving(TP)
        assert node.rm.log_manager.future_logs() == {}

    run(inside)


def test_not_hosted_in_a_known_partition_is_replica_not_available(node: Node) -> None:
    node.rm.partition_known = lambda tp: True

    async def inside() -> None:
        assert alter(node, node.dirs[1], TopicPartition("later", 0)) == (
            ErrorCode.REPLICA_NOT_AVAILABLE
        )

    run(inside)
    # The dir is remembered: the partition is created there when it comes.
    later = node.rm.log_manager.get_or_create_log(
        TopicPartition("later", 0), node.rm.partitions[TP].log.config
    )
    assert later.directory.parent == node.dirs[1]


def test_move_while_producing_keeps_every_record_and_answers_from_the_new_dir(
    tmp_path: Path,
) -> None:
    # A slow copy (64 KiB/s) so that produces land during it.
    node = make_node(tmp_path, **{"replica.alter.log.dirs.io.max.bytes.per.second": "65536"})
    source = node.rm.partitions[TP].log.directory.parent
    target = next(d for d in node.dirs if d != source)
    expected = [b"before-%05d-" % i + b"." * 200 for i in range(400)]
    for value in expected:
        node.produce(value)
    hw_before = node.rm.partitions[TP].partition.high_watermark

    async def inside() -> None:
        assert alter(node, target) == ErrorCode.NONE
        assert node.mover.moving(TP)
        assert alter(node, target) == ErrorCode.NONE  # the same move again: nothing new
        seen_future = False
        i = 0
        while node.mover.moving(TP):
            value = b"during-%05d" % i
            node.produce(value)
            expected.append(value)
            i += 1
            state = where(node)
            if (os.path.abspath(target), True) in {
                (d, fut) for d, entries in state.items() for _, _, fut in entries
            }:
                seen_future = True
                lag = next(lag for _, lag, fut in state[os.path.abspath(target)] if fut)
                assert lag >= 0
            await asyncio.sleep(0.01)
        assert seen_future
        assert i > 5, "the copy was too fast to overlap the produces"
        for k in range(20):
            value = b"after-%05d" % k
            node.produce(value)
            expected.append(value)

    run(inside)
    assert node.mover.completed == 1
    hosted = node.rm.partitions[TP]
    assert hosted.log.directory == target / str(TP)
    assert node.values() == expected
    assert hosted.partition.high_watermark >= hw_before
    assert where(node) == {os.path.abspath(target): [(hosted.log.size_bytes, 0, False)]}
    assert not (source / str(TP)).exists()
    node.rm.log_manager.close()


def test_a_new_target_replaces_the_move_and_the_old_future_is_deleted(tmp_path: Path) -> None:
    node = make_node(tmp_path, **{"replica.alter.log.dirs.io.max.bytes.per.second": "4096"})
    source = node.rm.partitions[TP].log.directory.parent
    target = next(d for d in node.dirs if d != source)
    for i in range(200):
        node.produce(b"v%04d" % i + b"." * 100)

    async def inside() -> None:
        assert alter(node, target) == ErrorCode.NONE
        await asyncio.sleep(0.2)
        assert list(target.glob(f"{TP}.*-future"))
        # Back to where it is: the move is abandoned, its future log deleted.
        assert alter(node, source) == ErrorCode.NONE
        assert not node.mover.moving(TP)
        await asyncio.sleep(0.3)
        assert not list(target.glob(f"{TP}.*-future"))
        # A move whose partition is deleted stops too.
        assert alter(node, target) == ErrorCode.NONE
        await asyncio.sleep(0.1)
        node.rm.delete_partitions([TP])
        await node.mover.wait(TP)
        assert not list(target.glob(f"{TP}*"))

    run(inside)
    assert node.mover.completed == 0
    assert node.mover.failed == 2
    node.rm.log_manager.close()


# --- authorization ----------------------------------------------------------------------------


def user(name: str) -> RequestContext:
    return RequestContext(KafkaPrincipal.user(name), "10.0.0.7", "PLAINTEXT", "PLAINTEXT")


def test_cluster_acls_are_required(node: Node) -> None:
    def allow(principal: str, *ops: AclOperation) -> frozenset[AccessControlEntry]:
        return frozenset(
            AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW) for op in ops
        )

    authorizer = AclAuthorizer(super_users=frozenset())
    acls = {
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME): allow(
            "User:ops", AclOperation.DESCRIBE, AclOperation.ALTER
        )
        | allow("User:viewer", AclOperation.DESCRIBE)
    }
    node.apis.authorizer = authorizer

    async def inside() -> None:
        await authorizer.attach(InMemoryAclStore(acls))
        set_request(user("nobody"))
        denied = describe(node)
        assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert denied.results == ()
        here = node.rm.partitions[TP].log.directory.parent
        assert alter(node, here) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        set_request(user("viewer"))
        assert describe(node).error_code == ErrorCode.NONE
        assert alter(node, here) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        set_request(user("ops"))
        assert alter(node, here) == ErrorCode.NONE

    run(inside)


# --- moves resumed after a restart (alter_log_dirs rule d) ------------------------------------


def reopen_node(node: Node, **extra: str) -> Node:
    """The broker restarted over the same log dirs; its partitions are not hosted yet (in a
    cluster they are when the controller's LeaderAndIsr arrives: ``host_all``)."""
    a, b = node.dirs
    config = load_broker_config({"log.dirs": f"{a},{b}", **extra})
    logs = LogManager([a, b], log_config_for(effective_topic_config(config, {})), now_ms=now_ms())
    apis = KafkaApis.alone(config, MetadataStore(a), ReplicaManager(config, logs), {})
    mover = ReplicaAlterLogDirsManager(config, apis.replica_manager)
    return Node(apis, mover, dict(LogDirApis(apis.helper, mover).handlers()), (a, b))


def host_all(node: Node) -> None:
    backend = node.apis.backend
    assert isinstance(backend, LocalBackend)
    backend.load_topics(node.rm.log_manager.high_watermarks())


def crash(node: Node) -> None:
    """What a SIGKILL leaves: the files as they are, nothing flushed or checkpointed."""
    lm = node.rm.log_manager
    for the_log in [*lm.all_logs().values(), *lm.future_logs().values()]:
        the_log.close_without_flush()


async def until_moved(node: Node, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while node.mover.waiting() or node.mover.moving(TP):
        assert asyncio.get_running_loop().time() < deadline, "the resumed move did not end"
        await asyncio.sleep(0.02)


def test_a_half_copied_move_resumes_after_a_crash_once_the_partition_is_hosted(
    tmp_path: Path,
) -> None:
    first = make_node(tmp_path)
    source = first.rm.partitions[TP].log.directory.parent
    target = next(d for d in first.dirs if d != source)
    expected = [b"before-%05d-" % i + b"." * 200 for i in range(400)]
    for value in expected:
        first.produce(value)
    current = first.rm.partitions[TP].log
    future = first.rm.log_manager.create_future_log(TP, target, now_ms=now_ms())
    FutureLogCopier(current, future, now_ms=now_ms()).copy(30_000)
    half = future.log_end_offset
    assert 0 < half < current.log_end_offset
    first.rm.log_manager.checkpoint(first.rm.high_watermarks())
    crash(first)

    node = reopen_node(first)

    async def inside() -> None:
        node.mover.resume_hosted()  # what the broker's start does (it has a loop already)
        # Loaded as TP's future log before anything is hosted: DescribeLogDirs lists it.
        assert node.mover.waiting() == [TP]
        assert not node.mover.moving(TP)
        state = where(node)
        assert [fut for _, _, fut in state[os.path.abspath(target)]] == [True]
        [(_, lag, _)] = state[os.path.abspath(target)]
        assert lag == current.log_end_offset - half
        assert [fut for _, _, fut in state[os.path.abspath(source)]] == [False]
        await asyncio.sleep(0.3)
        assert node.mover.waiting() == [TP]  # still waiting for its partition
        host_all(node)  # the LeaderAndIsr after the restart
        for i in range(10):
            value = b"after-%05d" % i
            node.produce(value)
            expected.append(value)
        await until_moved(node)

    run(inside)
    assert (node.mover.resumed, node.mover.completed, node.mover.failed) == (1, 1, 0)
    hosted = node.rm.partitions[TP]
    assert hosted.log.directory == target / str(TP)
    assert node.values() == expected
    assert where(node) == {os.path.abspath(target): [(hosted.log.size_bytes, 0, False)]}
    assert not (source / str(TP)).exists()
    assert not list(target.glob("*-future"))
    node.rm.log_manager.close()


def test_a_clean_shutdown_keeps_the_move_and_the_next_start_resumes_it(tmp_path: Path) -> None:
    slow = {"replica.alter.log.dirs.io.max.bytes.per.second": "65536"}
    first = make_node(tmp_path, **slow)
    source = first.rm.partitions[TP].log.directory.parent
    target = next(d for d in first.dirs if d != source)
    expected = [b"v%05d-" % i + b"." * 200 for i in range(400)]
    for value in expected:
        first.produce(value)

    async def move_then_stop() -> None:
        assert alter(first, target) == ErrorCode.NONE
        await asyncio.sleep(0.3)
        assert first.mover.moving(TP)
        await first.mover.stop()

    run(move_then_stop)
    assert first.mover.failed == 0
    first.rm.log_manager.checkpoint(first.rm.high_watermarks())
    first.rm.log_manager.close()
    [future_dir] = target.glob(f"{TP}.*-future")

    node = reopen_node(first)
    host_all(node)  # a standalone broker hosts its partitions before the mover starts

    async def inside() -> None:
        assert node.mover.resume_hosted() == 1
        assert node.mover.moving(TP)
        assert alter(node, target) == ErrorCode.NONE  # the same move: nothing new
        await until_moved(node)

    run(inside)
    assert (node.mover.resumed, node.mover.completed) == (1, 1)
    assert node.rm.partitions[TP].log.directory == target / str(TP)
    assert not future_dir.exists()
    assert node.values() == expected
    node.rm.log_manager.close()


def test_a_loaded_future_log_is_dropped_when_its_dir_is_offline_or_its_partition_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = make_node(tmp_path)
    tps = [TP, TopicPartition(TOPIC, 1)]
    for tp in tps:
        for i in range(50):
            first.produce(b"%d" % i, tp)
    lm = first.rm.log_manager
    targets = {}
    for tp in tps:
        here = first.rm.partitions[tp].log.directory.parent
        targets[tp] = next(d for d in first.dirs if d != here)
        future = lm.create_future_log(tp, targets[tp], now_ms=now_ms())
        FutureLogCopier(first.rm.partitions[tp].log, future, now_ms=now_ms()).copy(1000)
    lm.checkpoint(first.rm.high_watermarks())
    crash(first)

    node = reopen_node(first)

    async def inside() -> None:
        node.mover.resume_hosted()
        assert sorted(node.mover.waiting()) == tps
        # TP's target dir fails before TP is hosted again; partition 1 is deleted.
        node.rm.mark_log_dir_offline(targets[TP], OSError(errno.EIO, "I/O error"))
        host_all(node)
        node.rm.delete_partitions([tps[1]])
        await asyncio.sleep(1.0)
        assert node.mover.waiting() == []
        assert not node.mover.moving(TP)

    with caplog.at_level("WARNING"):
        run(inside)
    assert node.mover.resumed == 0
    assert "deleting its future log" in caplog.text
    assert "offline" in caplog.text
    assert not list(node.dirs[0].glob("*-future"))
    assert not list(node.dirs[1].glob("*-future"))
    assert node.rm.partitions[TP].log.log_end_offset == 50
    node.rm.log_manager.close()


def _stamped(value: bytes, base_offset: int, epoch: int) -> bytes:
    """A leader's batch as a follower receives it (base offset and partition leader epoch
    stamped; both outside the CRC-32C)."""
    batch = bytearray(build_batch([Record(value=value)]))
    batch[0:8] = base_offset.to_bytes(8, "big")
    batch[12:16] = epoch.to_bytes(4, "big")
    return bytes(batch)


def test_a_move_resumes_on_a_follower_whose_log_was_truncated_and_refilled(
    tmp_path: Path,
) -> None:
    """In a cluster the partition comes back as a follower; its fetcher truncates the log
    below what the future log had copied and refills it from the new leader (a new epoch)
    before the move resumes: the future log keeps only what still matches."""
    first = make_node(tmp_path)
    source = first.rm.partitions[TP].log.directory.parent
    target = next(d for d in first.dirs if d != source)
    for i in range(400):
        first.produce(b"old-%05d-" % i + b"." * 200)
    current = first.rm.partitions[TP].log
    future = first.rm.log_manager.create_future_log(TP, target, now_ms=now_ms())
    FutureLogCopier(current, future, now_ms=now_ms()).copy(60_000)
    half = future.log_end_offset
    assert 100 < half < 400
    crash(first)

    node = reopen_node(first)
    info = node.apis.metadata.topics[TOPIC]

    async def inside() -> None:
        node.mover.resume_hosted()
        assert node.mover.waiting() == [TP]
        node.rm.make_follower(
            TP,
            info.topic_id,
            node.apis.topic_config(info),
            leader=BrokerId(1),
            leader_epoch=5,
            partition_epoch=3,
            replicas=[BrokerId(0), BrokerId(1)],
            isr=[BrokerId(1)],
        )
        the_log = node.rm.partitions[TP].log
        the_log.truncate_to(half - 50)  # what the fetcher's OffsetsForLeaderEpoch decided
        for i in range(120):
            value = b"new-%05d" % i
            the_log.append_as_follower(_stamped(value, the_log.log_end_offset, 5), now_ms=now_ms())
        await until_moved(node)

    run(inside)
    assert (node.mover.resumed, node.mover.completed, node.mover.failed) == (1, 1, 0)
    moved = node.rm.partitions[TP].log
    assert moved.directory == target / str(TP)
    values: dict[int, bytes | None] = {}
    while (offset := len(values)) < moved.log_end_offset:
        for rec in decode_records(moved.read_records(offset, 1 << 20)):
            values.setdefault(rec.offset, rec.value)
    assert list(values) == list(range(moved.log_end_offset))
    assert list(values.values()) == [b"old-%05d-" % i + b"." * 200 for i in range(half - 50)] + [
        b"new-%05d" % i for i in range(120)
    ]
    assert [e.epoch for e in moved.leader_epoch_cache.entries][-1] == 5
    node.rm.log_manager.close()
