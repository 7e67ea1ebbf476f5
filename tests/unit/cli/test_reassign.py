"""``tidelog reassign`` and ``tidelog brokers decommission`` against a fake cluster: Kafka's
reassignment JSON both ways, generate's placement, the throttle configs, verify's states and
exit statuses, the decommission plan, every bad input's message (never a traceback); and
the client's pure request builders, response readers and NOT_CONTROLLER retry
(``tidelog.client.reassign_admin``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_response_schema

from tidelog.cli import (
    brokers,
    reassign,
    reassign_cluster,
    reassign_files,
    reassign_plans,
    reassign_steps,
)
from tidelog.cli.main import main
from tidelog.cli.output import CommandError, UsageError
from tidelog.client import config_admin as ca
from tidelog.client import log_dir_admin as lda
from tidelog.client import reassign_admin as ra
from tidelog.client.errors import BrokerError
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
RACKS = {1: "a", 2: "a", 3: "b", 4: "b"}
U0 = TopicPartition("u", 0)


class FakeAdmin:
    """A cluster in memory. A started reassignment is listed (RS = target + leaving
    replicas) until ``complete_after`` List calls have seen it; then the replicas are the
    target."""

    def __init__(
        self,
        assignment: Mapping[TopicPartition, Sequence[int]],
        live: Sequence[int] = (1, 2, 3),
        *,
        complete_after: int | None = None,
        racks: Mapping[int, str] | None = None,
    ) -> None:
        self.replicas = {tp: tuple(r) for tp, r in assignment.items()}
        self.live = list(live)
        self.racks = dict(racks or {})
        self.ongoing: dict[TopicPartition, ra.OngoingReassignment] = {}
        self.seen: dict[TopicPartition, int] = {}
        self.complete_after = complete_after
        self.refuse: dict[TopicPartition, ra.AlterResult] = {}
        self.alters: list[dict[TopicPartition, tuple[int, ...] | None]] = []
        self.configs: list[tuple[int, str, list[tuple[str, int, str | None]]]] = []
        self.config_error: tuple[ErrorCode, str | None] = (ErrorCode.NONE, None)
        self.not_yet = 0
        self.moves_done = False
        self.log_dir_moves: list[tuple[TopicPartition, int, str]] = []
        self.current_dir: dict[tuple[TopicPartition, int], str] = {}
        self.future_dir: dict[tuple[TopicPartition, int], str] = {}

    def live_brokers(self) -> list[int]:
        return sorted(self.live)

    def broker_racks(self) -> dict[int, str | None]:
        return {b: self.racks.get(b) for b in sorted(self.live)}

    def assignment(self, topics: Iterable[str] | None) -> dict[TopicPartition, tuple[int, ...]]:
        wanted = None if topics is None else set(topics)
        return {tp: r for tp, r in self.replicas.items() if wanted is None or tp.topic in wanted}

    def list_reassignments(
        self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, ra.OngoingReassignment]:
        wanted = None if partitions is None else set(partitions)
        for tp, running in list(self.ongoing.items()):
            self.seen[tp] = self.seen.get(tp, 0) + 1
            if self.complete_after is not None and self.seen[tp] > self.complete_after:
                self.replicas[tp] = running.target
                del self.ongoing[tp]
        return {tp: r for tp, r in self.ongoing.items() if wanted is None or tp in wanted}

    def alter_reassignments(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, ra.AlterResult]:
        self.alters.append({tp: None if r is None else tuple(r) for tp, r in reassignments.items()})
        out = {}
        for tp, target in reassignments.items():
            if tp in self.refuse:
                out[tp] = self.refuse[tp]
            elif target is None:
                running = self.ongoing.pop(tp, None)
                if running is None:
                    out[tp] = ra.AlterResult(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
                    continue
                self.replicas[tp] = running.origin
                out[tp] = ra.AlterResult(ErrorCode.NONE)
            else:
                origin = self.replicas[tp]
                out[tp] = ra.AlterResult(ErrorCode.NONE)
                if set(origin) == set(target):  # nothing to add or remove: done at once
                    self.replicas[tp] = tuple(target)
                    continue
                rs = tuple(target) + tuple(b for b in origin if b not in target)
                self.ongoing[tp] = ra.OngoingReassignment(
                    rs,
                    tuple(b for b in target if b not in origin),
                    tuple(b for b in origin if b not in target),
                )
                self.replicas[tp] = rs
                self.seen[tp] = 0
                out[tp] = ra.AlterResult(ErrorCode.NONE)
        return out

    def alter_configs(
        self, resource_type: int, name: str, ops: Sequence[ca.AlterOp]
    ) -> tuple[ErrorCode, str | None]:
        self.configs.append((resource_type, name, [(o.name, o.op, o.value) for o in ops]))
        return self.config_error

    # log dirs: every replica starts in /d/a; a move leaves a future log until
    # ``moves_done`` is set.
    def alter_replica_log_dirs(
        self, broker: int, dirs: Mapping[TopicPartition, str]
    ) -> dict[TopicPartition, ErrorCode]:
        out = {}
        for tp, path in dirs.items():
            if self.not_yet > 0 or broker not in self.replicas.get(tp, ()):
                self.not_yet -= 1
                out[tp] = ErrorCode.REPLICA_NOT_AVAILABLE
            elif path not in ("/d/a", "/d/b"):
                out[tp] = ErrorCode.LOG_DIR_NOT_FOUND
            else:
                self.log_dir_moves.append((tp, broker, path))
                current = self.current_dir.get((tp, broker), "/d/a")
                if path == current:
                    self.future_dir.pop((tp, broker), None)
                else:
                    self.future_dir[(tp, broker)] = path
                out[tp] = ErrorCode.NONE
        return out

    def describe_log_dirs(
        self, broker: int, partitions: Iterable[TopicPartition]
    ) -> lda.DescribeLogDirsResult:
        if self.moves_done:
            for key, path in list(self.future_dir.items()):
                self.current_dir[key] = path
                del self.future_dir[key]
        dirs = []
        for path in ("/d/a", "/d/b"):
            infos = []
            for tp in partitions:
                if broker in self.replicas.get(tp, ()):
                    if self.current_dir.get((tp, broker), "/d/a") == path:
                        infos.append(lda.ReplicaLogInfo(tp, 1, 0, False))
                    if self.future_dir.get((tp, broker)) == path:
                        infos.append(lda.ReplicaLogInfo(tp, 1, 0, True))
            dirs.append(lda.LogDirDescription(path, ErrorCode.NONE, tuple(infos)))
        return lda.DescribeLogDirsResult(ErrorCode.NONE, tuple(dirs))


@pytest.fixture(autouse=True)
def no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake's metadata never trails: no second look."""
    monkeypatch.setattr(reassign, "VERIFY_SETTLE_S", 0.0)
    monkeypatch.setattr(brokers, "METADATA_SETTLE_S", 0.0)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[FakeAdmin]:
    """``main([...])`` talks to ``cluster[0]``."""
    admins: list[FakeAdmin] = []

    @contextmanager
    def fake_open(args: object) -> Iterator[FakeAdmin]:
        yield admins[0]

    monkeypatch.setattr(reassign_cluster, "open_admin", fake_open)
    return admins


def write(tmp_path: Path, document: object, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def plan(*entries: tuple[str, int, list[int]]) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries],
    }


BS = ("--bootstrap-server", "127.0.0.1:1")


# --- the JSON files ---------------------------------------------------------------------------


def test_reassignment_json_round_trip_in_kafkas_format() -> None:
    text = reassign_files.reassignment_json({U0: [3], T1: [2, 3], T0: (1, 2)})
    assert text == (
        '{"version":1,"partitions":['
        '{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"t","partition":1,"replicas":[2,3],"log_dirs":["any","any"]},'
        '{"topic":"u","partition":0,"replicas":[3],"log_dirs":["any"]}]}'
    )
    moves = reassign_files.parse_reassignment_json(text)
    assert [(m.partition, m.replicas, m.log_dirs) for m in moves] == [
        (T0, (1, 2), ("any", "any")),
        (T1, (2, 3), ("any", "any")),
        (U0, (3,), ("any",)),
    ]
    # log_dirs and version may be left out (Kafka: "any", version 1).
    [move] = reassign_files.parse_reassignment_json(
        '{"partitions":[{"topic":"t","partition":0,"replicas":[2]}]}'
    )
    assert move.log_dirs == ("any",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "The input string is not a valid JSON"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
        ('{"version":1}', "Partition reassignment list cannot be empty"),
        (json.dumps(plan(("t", 0, []))), "Partition replica list cannot be empty"),
        (
            json.dumps(plan(("t", 0, [1]), ("t", 0, [2]))),
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        (
            json.dumps(plan(("t", 0, [1, 2, 1]), ("t", 1, [3, 3]))),
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
            "entries for 1. t-1 contains multiple entries for 3",
        ),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
            'Size of replicas list [1, 2] is different from size of log dirs list ["any"] for '
            "partition t-0",
        ),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}', "list of broker ids"),
        ('{"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}', "partition number"),
        ('{"partitions":[{"partition":0,"replicas":[1]}]}', '"topic" must be a topic name'),
        ("[1, 2]", "must be an object"),
    ],
)
def test_bad_reassignment_files(text: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        reassign_files.parse_reassignment_json(text)
    assert message in raised.value.message


def test_topics_to_move_file() -> None:
    assert reassign_files.parse_topics_json(
        '{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}'
    ) == ["a", "b"]
    for text, message in (
        ('{"topics":[{"topic":"a"},{"topic":"a"}]}', "contains duplicate entries: a"),
        ('{"topics":[]}', "cannot be empty"),
        ('{"topics":[{"name":"a"}]}', 'topics[0] must be an object {"topic": NAME}'),
        ("nope", "The input string is not a valid JSON"),
    ):
        with pytest.raises(UsageError) as raised:
            reassign_files.parse_topics_json(text)
        assert message in raised.value.message


# --- plans -------------------------------------------------------------------------------------


def test_generate_spreads_replicas_round_robin_and_keeps_the_replication_factor() -> None:
    current = {T0: [1, 2], T1: [1, 2], T2: [1, 2], U0: [1]}
    proposal = reassign_plans.propose_assignment(current, ["t", "u"], no_racks(4, 2, 3))
    # Brokers sorted (2, 3, 4): leaders rotate, followers follow; "u" starts where "t" ended.
    assert proposal == {T0: [2, 3], T1: [3, 4], T2: [4, 2], U0: [2]}
    with pytest.raises(UsageError) as raised:
        reassign_plans.propose_assignment({T0: [1, 2, 3]}, ["t"], no_racks(1, 2))
    assert raised.value.message == "Replication factor: 3 larger than available brokers: 2."
    assert raised.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def no_racks(*ids: int) -> dict[BrokerId, str | None]:
    return {BrokerId(b): None for b in ids}


def test_generate_places_rack_aware_when_the_brokers_have_racks() -> None:
    """Kafka's getBrokerMetadata then assignReplicasToBrokersRackAware: brokers 1-4 on racks
    a,a,b,b are interleaved 1,3,2,4, so every partition spans both racks."""
    racks = reassign_plans.placement_brokers([4, 3, 2, 1], {1: "a", 2: "a", 3: "b", 4: "b"})
    current = {TopicPartition("t", p): [1, 2] for p in range(4)}
    proposal = reassign_plans.propose_assignment(current, ["t"], racks)
    assert [proposal[TopicPartition("t", p)] for p in range(4)] == [[1, 3], [3, 2], [2, 4], [4, 1]]
    blind = reassign_plans.placement_brokers([1, 2], {1: "a", 2: "a"}, rack_aware=False)
    assert blind == no_racks(1, 2)
    with pytest.raises(CommandError) as raised:
        reassign_plans.placement_brokers([1, 2], {1: "a", 2: None})
    assert raised.value.message == (
        "Not all brokers have rack information. Add --disable-rack-aware in command line to "
        "make replica assignment without rack information."
    )
    assert reassign_plans.placement_brokers([1, 2], {1: "a"}, rack_aware=False) == no_racks(1, 2)


def test_throttle_plan_is_kafkas_leader_and_follower_lists() -> None:
    plan_ = reassign_plans.throttle_plan(
        {T0: ([1, 2], [2, 3]), T1: ([3], [3]), U0: ([1], [4, 5]), T2: ([10], [1])}
    )
    # Kafka's tree set of strings: every source leads ("10:..." sorts before "2:..."), only
    # added replicas follow; t-1 does not move but its leader is listed, as in Kafka.
    assert plan_.leader == {"t": "0:1,0:2,1:3,2:10", "u": "0:1"}
    assert plan_.follower == {"t": "0:3,2:1", "u": "0:4,0:5"}
    assert plan_.brokers == (1, 2, 3, 4, 5, 10)
    # A running reassignment keeps its original replicas as sources; others stay in.
    running = {
        T0: ra.OngoingReassignment((4, 1), (4,), (1,)),
        U0: ra.OngoingReassignment((2, 3), (2,), (3,)),
    }
    moves = reassign_plans.proposed_moves({T0: [5]}, {T0: (4, 1)}, running)
    assert moves == {T0: ((1,), [5]), U0: ((3,), (2,))}


def test_partition_states_and_their_lines() -> None:
    states = reassign_plans.partition_states(
        {T0: [2, 3], T1: [2], T2: [3]},
        {T0: ra.OngoingReassignment((2, 3, 1), (2, 3), (1,))},
        {T0: (2, 3, 1), T1: (2,), T2: (1,)},
    )
    assert [states[tp].describe(tp) for tp in (T0, T1, T2)] == [
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is completed.",
        "There is no active reassignment of partition t-2, but replica set is 1 rather than 3.",
    ]


def test_decommission_plan_fills_the_least_loaded_brokers_and_keeps_the_order() -> None:
    assignment = {
        T0: [3, 1],  # 3 leads: the new broker becomes the preferred leader
        T1: [1, 3],  # 3 follows: 1 stays the preferred leader
        T2: [1, 2],  # not on 3
        U0: [2, 3, 4],
    }
    new_plan, stuck = brokers.decommission_plan(3, assignment, [1, 2, 3, 4])
    # Loads before: 1:3, 2:2, 4:1. t-0 -> 4 (least), t-1 -> 2 (4 and 2 tie at 2: lower id),
    # u-0 -> 1 (the only broker not already a replica).
    assert new_plan == {T0: [4, 1], T1: [1, 2], U0: [2, 1, 4]}
    assert stuck == {}
    # Replication factor 3 with two live brokers besides 3: t-0 cannot move. u-0 has a
    # replica on a dead broker (5): the controller would refuse its target.
    new_plan, stuck = brokers.decommission_plan(3, {T0: [1, 2, 3], T1: [3], U0: [5, 3]}, [1, 2, 3])
    assert stuck == {T0: "no other live broker to take it", U0: "broker 5 not live"}
    assert new_plan == {T1: [1]}


def test_decommission_plan_prefers_a_rack_the_other_replicas_are_not_on() -> None:
    """Racks a: 1, 2; b: 3, 4. t-0 on 1 (a) and 3 (b) loses 3: broker 2 hosts fewer
    replicas than 4, but it is on rack a with 1, so 4 (rack b) takes it; without racks
    (or with --disable-rack-aware) the least loaded broker, 2, does."""
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b"}
    assignment = {T0: [1, 3], T1: [4], U0: [4]}
    new_plan, stuck = brokers.decommission_plan(3, assignment, [1, 2, 3, 4], racks)
    assert (new_plan, stuck) == ({T0: [1, 4]}, {})
    blind, _ = brokers.decommission_plan(3, assignment, [1, 2, 3, 4])
    assert blind == {T0: [1, 2]}
    # u-0 on two brokers of rack b gains rack a when one of them leaves.
    gained, _ = brokers.decommission_plan(3, {U0: [4, 3]}, [1, 2, 3, 4], racks)
    assert gained == {U0: [4, 1]}


# --- the commands ------------------------------------------------------------------------------


def test_generate_prints_current_and_proposed(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.append(FakeAdmin({T0: [1], T1: [1]}, live=[1, 2, 3]))
    topics = write(tmp_path, {"topics": [{"topic": "t"}], "version": 1}, "topics.json")
    assert main(["reassign", "generate", *BS, "--topics-to-move-json-file", topics,
                 "--broker-list", "2,3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out == (
        "Current partition replica assignment\n"
        + reassign_files.reassignment_json({T0: [1], T1: [1]})
        + "\n\nProposed partition reassignment configuration\n"
        + reassign_files.reassignment_json({T0: [2], T1: [3]})
        + "\n"
    )
    assert cluster[0].alters == []  # generate changes nothing

    unknown = write(tmp_path, {"topics": [{"topic": "nope"}]}, "unknown.json")
    assert main(["reassign", "generate", *BS, "--topics-to-move-json-file", unknown,
                 "--broker-list", "2"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "tidelog reassign: error: UNKNOWN_TOPIC_OR_PARTITION: Topic nope not found" in err
    assert "Traceback" not in err


def test_generate_usage_errors(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.append(FakeAdmin({T0: [1]}))
    topics = write(tmp_path, {"topics": [{"topic": "t"}]}, "topics.json")
    assert main(["reassign", "generate", *BS, "--topics-to-move-json-file", topics,
                 "--broker-list", "2,9"]) == 2  # fmt: skip
    assert "error: Unknown broker id 9" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["reassign", "generate", *BS, "--topics-to-move-json-file", topics,
              "--broker-list", "2,2"])  # fmt: skip
    assert exited.value.code == 2
    assert "Broker list contains duplicate entries: 2" in capsys.readouterr().err
    assert main(["reassign", "generate", *BS, "--topics-to-move-json-file",
                 str(tmp_path / "missing.json"), "--broker-list", "2"]) == 2  # fmt: skip
    assert "--topics-to-move-json-file" in capsys.readouterr().err


def test_execute_with_throttle_then_verify_then_clear(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1], T1: [1, 2], U0: [3]}, complete_after=1)
    cluster.append(admin)
    f = write(tmp_path, plan(("t", 0, [2, 3]), ("t", 1, [1, 2])))
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f,
                 "--throttle", "1000"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "Current partition replica assignment",
        "",
        reassign_files.reassignment_json({T0: [1], T1: [1, 2]}),
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 1000 B/s",
        "Successfully started partition reassignments for t-0,t-1",
    ]
    assert admin.alters == [{T0: (2, 3), T1: (1, 2)}]
    # As Kafka's tool: every partition of the file leads throttled, the added ones follow.
    assert admin.configs == [
        (ca.TOPIC, "t", [("leader.replication.throttled.replicas", ca.SET, "0:1,1:1,1:2"),
                         ("follower.replication.throttled.replicas", ca.SET, "0:2,0:3")]),
        *[
            (ca.BROKER, str(b), [("leader.replication.throttled.rate", ca.SET, "1000"),
                                 ("follower.replication.throttled.rate", ca.SET, "1000")])
            for b in (1, 2, 3)
        ],
    ]  # fmt: skip

    # Still running: exit 3, throttles kept.
    admin.configs.clear()
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f]) == 3
    assert capsys.readouterr().out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is still in progress.",
        "Reassignment of partition t-1 is completed.",
    ]
    assert admin.configs == []
    # Done: exit 0, every throttle removed.
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic t",
    ]
    deleted_broker = [(k, ca.DELETE, None) for k in reassign_steps.BROKER_THROTTLES]
    assert admin.configs == [
        *[(ca.BROKER, str(b), deleted_broker) for b in (1, 2, 3)],
        (ca.TOPIC, "t", [(k, ca.DELETE, None) for k in reassign_steps.TOPIC_THROTTLES]),
    ]
    assert admin.replicas[T0] == (2, 3)
    # --preserve-throttles leaves them.
    admin.configs.clear()
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f,
                 "--preserve-throttles"]) == 0  # fmt: skip
    assert admin.configs == []


def test_execute_refusals_print_kafkas_messages(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1], T1: [1]})
    cluster.append(admin)

    def execute(document: object, *extra: str) -> tuple[int, str]:
        code = main(["reassign", "execute", *BS, "--reassignment-json-file",
                     write(tmp_path, document), *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return code, err

    assert execute("{oops") == (
        2, "tidelog reassign: error: The input string is not a valid JSON\n"
    )  # fmt: skip
    code, err = execute(plan(("t", 0, [2, 9])))
    assert code == 2
    assert "error: Unknown broker id 9" in err
    code, err = execute(plan(("t", 5, [2])))
    assert code == 2
    assert "error: UNKNOWN_TOPIC_OR_PARTITION: Unable to find partition: t-5" in err
    code, err = execute(plan(("t", 0, [2, 2])))
    assert code == 2
    assert "may not contain duplicate entries: t-0 contains multiple entries for 2" in err
    assert admin.alters == []  # nothing was sent for any of these

    # The controller refuses one partition: its error and message, and what did start.
    admin.refuse[T1] = ra.AlterResult(
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment has offline brokers"
    )
    code, err = execute(plan(("t", 0, [2]), ("t", 1, [3])))
    assert code == 1
    assert (
        "error: INVALID_REPLICA_ASSIGNMENT: Error reassigning partition(s):\n"
        "t-1: INVALID_REPLICA_ASSIGNMENT: Replica assignment has offline brokers\n"
        "Started for t-0"
    ) in err
    # Another reassignment runs now (t-0): refused without --additional.
    code, err = execute(plan(("t", 1, [3])))
    assert code == 1
    assert "REASSIGNMENT_IN_PROGRESS: Cannot execute because there is an existing" in err
    del admin.refuse[T1]
    code, _ = execute(plan(("t", 1, [3])), "--additional")
    assert code == 0
    # A broker refusing the throttle: its error, and no reassignment started.
    admin.config_error = (ErrorCode.INVALID_CONFIG, "bad value")
    before = len(admin.alters)
    code, err = execute(plan(("t", 1, [2])), "--additional", "--throttle", "10")
    assert code == 1
    assert "INVALID_CONFIG: setting leader.replication.throttled.replicas" in err
    assert len(admin.alters) == before


def test_verify_when_replicas_differ_and_cancel(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1], T1: [1]})
    cluster.append(admin)
    f = write(tmp_path, plan(("t", 0, [2]), ("t", 1, [3])))
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f]) == 0
    capsys.readouterr()
    assert main(["reassign", "cancel", *BS, "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Successfully cancelled partition reassignments for: t-0,t-1",
        "Clearing broker-level throttles on brokers 1,2,3",
        "Clearing topic-level throttles on topic t",
    ]
    assert admin.alters[-1] == {T0: None, T1: None}
    assert admin.replicas == {T0: (1,), T1: (1,)}
    assert main(["reassign", "cancel", *BS, "--reassignment-json-file", f,
                 "--preserve-throttles"]) == 0  # fmt: skip
    assert capsys.readouterr().out == "None of the specified partition reassignments are active.\n"
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f,
                 "--preserve-throttles"]) == 4  # fmt: skip
    assert "but replica set is 1 rather than 2." in capsys.readouterr().out


def test_log_dirs_are_moved_verified_and_cancelled(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1], T1: [2]}, complete_after=1)
    admin.not_yet = 2  # the broker answers REPLICA_NOT_AVAILABLE twice: asked again
    cluster.append(admin)
    f = write(
        tmp_path,
        {
            "version": 1,
            "partitions": [
                {"topic": "t", "partition": 0, "replicas": [2], "log_dirs": ["/d/b/"]},
                {"topic": "t", "partition": 1, "replicas": [2], "log_dirs": ["/d/b"]},
            ],
        },
    )
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f,
                 "--replica-alter-log-dirs-throttle", "500"]) == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[-4:] == [
        reassign_steps.THROTTLE_WARNING,
        "The replica-alter-dir throttle limit was set to 500 B/s",
        "Successfully started partition reassignments for t-0,t-1",
        "Successfully started log directory moves for: t-0-2,t-1-2",
    ]
    # Only t-0 changes brokers; both log dir moves went to broker 2, the dir normalised.
    assert admin.alters == [{T0: (2,), T1: (2,)}]
    assert admin.log_dir_moves == [(T0, 2, "/d/b"), (T1, 2, "/d/b")]
    assert admin.configs == [
        (ca.BROKER, "2", [("replica.alter.log.dirs.io.max.bytes.per.second", ca.SET, "500")])
    ]
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f]) == 3
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "Reassignment of replica t-0-2 is still in progress.",
        "Reassignment of replica t-1-2 is still in progress.",
    ]
    # Cancel sends a running move back to the dir the replica is in.
    assert main(["reassign", "cancel", *BS, "--reassignment-json-file", f,
                 "--preserve-throttles"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        "None of the specified partition reassignments are active.",
        "Successfully started log directory moves for: t-0-2,t-1-2",
    ]
    assert admin.future_dir == {}
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f,
                 "--preserve-throttles"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Partition t-1 on broker 2 is not being moved from log dir /d/a to /d/b."
    )
    # Again, and this time the copies finish.
    admin.alters.clear()
    admin.moves_done = True
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f]) == 0
    capsys.readouterr()
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out.splitlines()[1:5] == [
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is completed.",
        "Reassignment of replica t-0-2 completed successfully.",
        "Reassignment of replica t-1-2 completed successfully.",
    ]


def test_log_dir_move_that_cannot_start_times_out(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1]})
    admin.not_yet = 10**6
    cluster.append(admin)
    f = write(
        tmp_path,
        {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d/b"]}]},
    )
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f,
                 "--timeout", "250"]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "REQUEST_TIMED_OUT: Timed out before log directory move could be started for: t-0-1" in err
    )
    admin.not_yet = 0
    f = write(
        tmp_path,
        {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/nowhere"]}]},
    )
    assert main(["reassign", "execute", *BS, "--reassignment-json-file", f]) == 1
    assert "LOG_DIR_NOT_FOUND: Failed to alter dir for t-0-1" in capsys.readouterr().err


def test_list_and_throttles_kept_while_others_run(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1], T1: [1], U0: [2]})
    cluster.append(admin)
    assert main(["reassign", "list", *BS]) == 0
    assert capsys.readouterr().out == "No partition reassignments found.\n"
    admin.alter_reassignments({T0: [2, 3], U0: [3]})
    assert main(["reassign", "list", *BS]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Current partition reassignments:",
        "t-0: replicas: 2,3,1. adding: 2,3. removing: 1.",
        "u-0: replicas: 3,2. adding: 3. removing: 2.",
    ]
    # t-1 is where the file wants it, but t-0 and u-0 still move: throttles stay.
    f = write(tmp_path, plan(("t", 1, [1])))
    assert main(["reassign", "verify", *BS, "--reassignment-json-file", f]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-1 is completed.",
        "Throttles kept: other partition reassignments run (t-0,u-0).",
    ]
    assert admin.configs == []


def test_decommission_waits_and_summarises(
    cluster: list[FakeAdmin], capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [3, 1], T1: [1, 2], U0: [2, 3]}, complete_after=2)
    cluster.append(admin)
    code = brokers.decommission(admin, 3, throttle=500, poll_interval_s=0.0)
    assert code == 0
    captured = capsys.readouterr()
    assert admin.alters == [{T0: (2, 1), U0: (2, 1)}]
    assert admin.replicas == {T0: (2, 1), T1: (1, 2), U0: (2, 1)}
    lines = captured.out.splitlines()
    assert reassign_files.reassignment_json({T0: [2, 1], U0: [2, 1]}) in lines
    assert "Successfully started partition reassignments for t-0,u-0" in lines
    assert "Clearing topic-level throttles on topics t,u" in lines
    assert lines[-3:] == [
        "t-0: [3, 1] -> [2, 1]",
        "u-0: [2, 3] -> [2, 1]",
        lines[-1],
    ]
    assert lines[-1].startswith("Broker 3 hosts no replicas any more: moved 2 replicas in ")
    assert "Moving 2 replicas off broker 3 onto brokers 1,2" in captured.err
    assert "0 of 2 moved off broker 3; still moving: t-0,u-0" in captured.err


def test_decommission_refusals_and_dry_run(
    cluster: list[FakeAdmin], capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [1, 2, 3], T1: [3, 1]})
    cluster.append(admin)
    assert main(["brokers", "decommission", *BS, "3"]) == 1
    err = capsys.readouterr().err
    assert (
        "tidelog brokers: error: INVALID_REPLICATION_FACTOR: cannot move every replica off "
        "broker 3 (live brokers besides it: 1,2): 1 partition cannot move: t-0 (replicas "
        "[1, 2, 3]: no other live broker to take it)"
    ) in err
    assert "nothing was changed" in err
    assert admin.alters == []
    admin.live.append(4)
    assert main(["brokers", "decommission", *BS, "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert reassign_files.reassignment_json({T0: [1, 2, 4], T1: [2, 1]}) in out
    assert out.endswith("Dry run: nothing was changed.\n")
    assert admin.alters == []
    assert main(["brokers", "decommission", *BS, "5"]) == 0
    assert "Broker 5 hosts no replicas: nothing to move" in capsys.readouterr().out
    # --no-wait returns once started; a second decommission is refused while it runs.
    assert main(["brokers", "decommission", *BS, "3", "--no-wait"]) == 0
    assert admin.ongoing
    assert main(["brokers", "decommission", *BS, "1", "--no-wait"]) == 1
    assert "Cannot execute because there is an existing" in capsys.readouterr().err


def test_generate_and_decommission_with_racks(
    cluster: list[FakeAdmin], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Racks a: 1, 2; b: 3, 4 (broker 5 joins without a rack): the commands place across
    racks, and refuse a mix of brokers with and without racks as Kafka's tool does, unless
    --disable-rack-aware."""
    admin = FakeAdmin({T0: [1, 3], T1: [4], U0: [4]}, live=[1, 2, 3, 4], racks=RACKS)
    cluster.append(admin)
    assert main(["brokers", "decommission", *BS, "3", "--dry-run"]) == 0
    assert reassign_files.reassignment_json({T0: [1, 4]}) in capsys.readouterr().out
    topics = write(tmp_path, {"topics": [{"topic": "t"}], "version": 1}, "topics.json")
    generate = ["reassign", "generate", *BS, "--topics-to-move-json-file", topics]
    assert main([*generate, "--broker-list", "1,2,3,4"]) == 0
    proposed = reassign_files.reassignment_json({T0: [1, 3], T1: [3, 2]})
    assert proposed in capsys.readouterr().out
    admin.live.append(5)
    refusal = (
        "error: Not all brokers have rack information. Add --disable-rack-aware in command "
        "line to make replica assignment without rack information."
    )
    assert main([*generate, "--broker-list", "1,5"]) == 1
    assert refusal in capsys.readouterr().err
    assert main(["brokers", "decommission", *BS, "3", "--dry-run"]) == 1
    assert refusal in capsys.readouterr().err
    assert main([*generate, "--broker-list", "1,5", "--disable-rack-aware"]) == 0
    assert reassign_files.reassignment_json({T0: [1, 5], T1: [5, 1]}) in capsys.readouterr().out
    assert main(["brokers", "decommission", *BS, "3", "--dry-run", "--disable-rack-aware"]) == 0
    assert reassign_files.reassignment_json({T0: [1, 2]}) in capsys.readouterr().out
    assert admin.alters == []


def test_decommission_wait_times_out(
    cluster: list[FakeAdmin], capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FakeAdmin({T0: [3]}, complete_after=None)
    cluster.append(admin)
    assert main(["brokers", "decommission", *BS, "3", "--timeout", "0"]) == 1
    err = capsys.readouterr().err
    assert "REQUEST_TIMED_OUT: 1 partition still moving off broker 3 after 0 s" in err
    assert "tidelog reassign verify" in err


# --- the client's requests and answers ----------------------------------------------------------


def response(api: ApiKey, data: dict[str, object]) -> object:
    return build(load_response_schema(api, 0), data)


def test_requests_and_answers() -> None:
    request = ra.alter_partition_reassignments_request(
        {T1: [3, 2], U0: None, T0: [1]}, timeout_ms=5000
    )
    assert request.timeout.total_seconds() == 5
    assert [
        (t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in request.topics
    ] == [
        ("t", [(0, (1,)), (1, (3, 2))]),
        ("u", [(0, None)]),
    ]
    assert ra.list_partition_reassignments_request(None).topics is None
    [topic] = ra.list_partition_reassignments_request([T1, T0, T1]).topics
    assert (topic.name, topic.partition_indexes) == ("t", (0, 1))

    error, message, answers = ra.read_alter_partition_reassignments(
        response(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            {
                "error_code": 0,
                "responses": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "error_code": 0},
                            {"partition_index": 1, "error_code": 39, "error_message": "no"},
                        ],
                    }
                ],
            },
        )
    )
    assert (error, message) == (ErrorCode.NONE, None)
    assert answers == {
        T0: ra.AlterResult(ErrorCode.NONE),
        T1: ra.AlterResult(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "no"),
    }
    error, _, ongoing = ra.read_list_partition_reassignments(
        response(
            ApiKey.LIST_PARTITION_REASSIGNMENTS,
            {
                "error_code": 0,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "replicas": [2, 3, 1],
                                "adding_replicas": [2, 3],
                                "removing_replicas": [1],
                            }
                        ],
                    }
                ],
            },
        )
    )
    [running] = ongoing.values()
    assert (running.target, running.origin) == ((2, 3), (1,))


class FakeConn:
    address = "fake:1"
    request_timeout_s = 5.0

    def __init__(self, node: int, answers: list[object]) -> None:
        self.node = node
        self.answers = answers
        self.sent: list[object] = []

    def pick_version(self, api_key: ApiKey, preferred: tuple[int, ...]) -> int | None:
        return preferred[0]

    async def send(self, body: object, *, timeout_s: float | None = None) -> object:
        self.sent.append(body)
        return self.answers.pop(0)


class FakeClient:
    """Metadata names controller 1, then (after the first refresh) controller 2."""

    def __init__(self, conns: dict[int, FakeConn]) -> None:
        self.conns = conns
        self.cluster: Any = None
        self.controllers = [1, 2, 2, 2]
        self.asked: list[int | None] = []

    async def metadata(self, topics: object = None) -> Any:
        controller = self.controllers.pop(0)

        self.cluster = SimpleNamespace(controller_id=controller, brokers={1: None, 2: None})
        return self.cluster

    async def connection(self, node: int | None = None) -> FakeConn:
        self.asked.append(node)
        assert node is not None
        return self.conns[node]


def test_the_calls_go_to_the_controller_and_follow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ra, "RETRY_BACKOFF_S", 0.0)
    not_controller = response(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"error_code": 41, "responses": []}
    )
    ok = response(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        {
            "error_code": 0,
            "responses": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}],
        },
    )
    conns = {1: FakeConn(1, [not_controller]), 2: FakeConn(2, [ok])}
    client = FakeClient(conns)
    answers = asyncio.run(ra.alter_partition_reassignments(client, {T0: [2], T1: None}))  # type: ignore[arg-type]
    assert client.asked == [1, 2]
    assert answers[T0] == ra.AlterResult(ErrorCode.NONE)
    # A partition the answer left out is no silent success.
    assert answers[T1].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # Any other top-level error is raised with the broker's message.
    refused = response(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        {"error_code": 31, "error_message": "not allowed", "topics": []},
    )
    client = FakeClient({1: FakeConn(1, [refused]), 2: FakeConn(2, [])})
    with pytest.raises(BrokerError) as raised:
        asyncio.run(ra.list_partition_reassignments(client, None))  # type: ignore[arg-type]
    assert raised.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert "not allowed" in str(raised.value)


class BuiltError(Exception):
    """Raised by the fake BlockingClient once it has seen its arguments."""


@pytest.mark.parametrize(
    "argv",
    [
        ["reassign", "verify", "--reassignment-json-file", "PLAN"],
        ["reassign", "execute", "--reassignment-json-file", "PLAN"],
        ["brokers", "decommission", "3"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_command_config_security_reaches_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    properties = tmp_path / "admin.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\nsasl.password=secret\n"
    )
    f = write(tmp_path, plan(("t", 0, [1])))
    seen: dict[str, Any] = {}

    def fake(bootstrap: str, **kwargs: Any) -> Any:
        seen.update(kwargs, bootstrap=bootstrap)
        raise BuiltError

    monkeypatch.setattr(reassign_cluster, "BlockingClient", fake)
    with pytest.raises(BuiltError):
        main([*(f if a == "PLAN" else a for a in argv), "--bootstrap-server", "h:9092",
              "--command-config", str(properties)])  # fmt: skip
    assert seen["bootstrap"] == "h:9092"
    assert seen["security"].sasl_username == "admin"
