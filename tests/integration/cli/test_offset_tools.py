"""``tidelog groups reset-offsets|delete-offsets``, ``delete-records`` and ``get-offsets`` as
subprocesses against one real broker, with a real consumer (confluent-kafka) for a live group."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess, wait_until
from tests.integration.cli.conftest import Result, Tidelog
from tests.integration.groups.helpers import GROUP_OVERRIDES, create_topic
from tidelog.cli.main import main

pytestmark = pytest.mark.integration

#: Record i of every partition has the timestamp BASE_MS + i s, an hour ago.
BASE_MS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("offset-tools"), GROUP_OVERRIDES).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def cli() -> Tidelog:
    """``cli("groups", "list", ...)``: ``tidelog.cli.main.main`` in this process (the start-up
    of a ``python -m tidelog`` process costs a second on a loaded machine)."""

    def run(*args: str, input: str | None = None, timeout: float = 60.0) -> Result:
        del input, timeout
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = int(exc.code or 0)
        return Result(code, out.getvalue(), err.getvalue())

    return run


def produce_timed(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p, timestamp=BASE_MS + i * 1000)
    assert producer.flush(30) == 0


def iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def plan_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], out
    return [line.split() for line in lines[1:]]


def committed(cli: Tidelog, bs: tuple[str, str], group: str) -> dict[str, int | None]:
    described = cli("groups", "describe", *bs, "--group", group, "--json")
    assert described.returncode == 0, described.stderr
    view: dict[str, Any] = json.loads(described.stdout)[0]
    return {f"{p['topic']}-{p['partition']}": p["current_offset"] for p in view["partitions"]}


def test_reset_offsets_plans_and_executes(
    group_broker: BrokerProcess, tidelog: Tidelog, cli: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", group_broker.bootstrap)
    create_topic(group_broker.bootstrap, "ro", 2)
    produce_timed(group_broker.bootstrap, "ro", 2, 10)

    # The real entry point once (a process of its own); in-process from here on.
    dry = tidelog(
        "groups", "reset-offsets", *bs, "--group", "g1", "--topic", "ro", "--to-offset", "4"
    )
    assert dry.returncode == 0, dry.stderr
    assert plan_rows(dry.stdout) == [["g1", "ro", "0", "4"], ["g1", "ro", "1", "4"]]
    assert dry.stderr.startswith("WARN: No action will be performed as the --execute option")
    assert cli("groups", "list", *bs).stdout == ""  # nothing was committed

    done = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--topic", "ro", "--to-offset", "4",
        "--execute",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert plan_rows(done.stdout) == [["g1", "ro", "0", "4"], ["g1", "ro", "1", "4"]]
    assert done.stderr == ""
    assert committed(cli, bs, "g1") == {"ro-0": 4, "ro-1": 4}

    shifted = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--topic", "ro:0", "--shift-by", "-6",
        "--execute",
    )  # fmt: skip
    assert plan_rows(shifted.stdout) == [["g1", "ro", "0", "0"]]
    assert shifted.stderr.splitlines() == [
        "WARN New offset (-2) is lower than earliest offset for topic partition ro-0. "
        "Value will be set to 0"
    ]
    assert committed(cli, bs, "g1") == {"ro-0": 0, "ro-1": 4}

    by_time = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--all-topics", "--dry-run",
        "--to-datetime", iso(BASE_MS + 6500),
    )  # fmt: skip
    assert (by_time.returncode, by_time.stderr) == (0, "")
    assert plan_rows(by_time.stdout) == [["g1", "ro", "0", "7"], ["g1", "ro", "1", "7"]]
    # Now minus 30 minutes is after every record: Kafka falls back to the log end.
    recent = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--topic", "ro:1", "--dry-run",
        "--by-duration", "PT30M",
    )  # fmt: skip
    assert plan_rows(recent.stdout) == [["g1", "ro", "1", "10"]]
    assert recent.stderr.splitlines() == [
        "WARN Partition 1 from topic ro is empty. Falling back to latest known offset."
    ]

    exported = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--topic", "ro", "--to-current",
        "--dry-run", "--export",
    )  # fmt: skip
    assert exported.stdout == "ro,0,0\nro,1,4\n"
    everyone = cli(
        "groups", "reset-offsets", *bs, "--all-groups", "--topic", "ro", "--to-current",
        "--dry-run", "--export",
    )  # fmt: skip
    assert everyone.returncode == 0, everyone.stderr
    mine = [line for line in everyone.stdout.splitlines() if line.startswith("g1,")]
    assert mine == ["g1,ro,0,0", "g1,ro,1,4"]  # --all-groups: the group column, as Kafka
    plan = tmp_path / "plan.csv"
    plan.write_text("ro,0,3\nro,1,12\n")
    from_file = cli(
        "groups", "reset-offsets", *bs, "--group", "g1", "--from-file", str(plan), "--execute"
    )
    assert from_file.returncode == 0, from_file.stderr
    assert plan_rows(from_file.stdout) == [["g1", "ro", "0", "3"], ["g1", "ro", "1", "10"]]
    assert committed(cli, bs, "g1") == {"ro-0": 3, "ro-1": 10}


def test_reset_offsets_bad_input(group_broker: BrokerProcess, cli: Tidelog) -> None:
    bs = ("--bootstrap-server", group_broker.bootstrap)
    no_scope = cli("groups", "reset-offsets", *bs, "--group", "g9", "--to-earliest")
    assert (no_scope.returncode, no_scope.stderr) == (
        2,
        "tidelog groups: error: One of the reset scopes should be defined: --all-topics, "
        "--topic.\n",
    )
    two = cli(
        "groups", "reset-offsets", *bs, "--group", "g9", "--topic", "x", "--to-earliest",
        "--to-latest",
    )  # fmt: skip
    assert two.returncode == 2
    assert "argument --to-latest: not allowed with argument --to-earliest" in two.stderr
    bad_time = cli(
        "groups", "reset-offsets", *bs, "--group", "g9", "--topic", "x", "--by-duration", "1h"
    )
    assert (bad_time.returncode, bad_time.stderr) == (
        2,
        "tidelog groups: error: Text '1h' cannot be parsed to a Duration (e.g. P1DT2H30M)\n",
    )
    unknown = cli(
        "groups", "reset-offsets", *bs, "--group", "g9", "--topic", "nope", "--to-earliest",
        "--dry-run",
    )  # fmt: skip
    assert unknown.returncode == 1
    assert unknown.stderr.splitlines()[0] == (
        "tidelog groups: error: UNKNOWN_TOPIC_OR_PARTITION: topic 'nope'"
    )
    no_commit = cli(
        "groups", "reset-offsets", *bs, "--group", "g9", "--topic", "ro", "--shift-by", "1",
        "--dry-run",
    )  # fmt: skip
    assert no_commit.returncode == 1
    assert no_commit.stderr.splitlines()[-1] == (
        "tidelog groups: error: group 'g9': Cannot shift offset for partition ro-0 since "
        "there is no current committed offset"
    )


def test_an_active_group_is_refused_then_its_offsets_deleted(
    group_broker: BrokerProcess, cli: Tidelog
) -> None:
    from confluent_kafka import Consumer

    bs = ("--bootstrap-server", group_broker.bootstrap)
    create_topic(group_broker.bootstrap, "live", 1)
    create_topic(group_broker.bootstrap, "old", 2)
    seeded = cli(
        "groups", "reset-offsets", *bs, "--group", "g2", "--topic", "live", "--topic", "old",
        "--to-latest", "--execute",
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr
    consumer = Consumer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "group.id": "g2",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe(["live"])

        def assigned() -> bool:
            consumer.poll(0.2)
            return bool(consumer.assignment())

        wait_until(assigned, 30, "the consumer to be assigned 'live'")
        refused = cli(
            "groups", "reset-offsets", *bs, "--group", "g2", "--topic", "live", "--to-earliest",
            "--execute",
        )  # fmt: skip
        assert (refused.returncode, refused.stdout) == (1, "")
        assert refused.stderr.splitlines() == [
            "tidelog groups: error: Assignments can only be reset if the group 'g2' is "
            "inactive, but the current state is Stable.",
            "hint: stop the group's consumers first",
        ]
        subscribed = cli(
            "groups", "delete-offsets", *bs, "--group", "g2", "--topic", "live",
            "--topic", "old:1", "--topic", "ghost",
        )  # fmt: skip
        assert subscribed.returncode == 1
        assert [line.split(None, 2) for line in subscribed.stdout.splitlines()] == [
            ["TOPIC", "PARTITION", "STATUS"],
            ["ghost", "Not", "Provided  Error: UNKNOWN_TOPIC_OR_PARTITION"],
            ["live", "0", "Error: GROUP_SUBSCRIBED_TO_TOPIC"],
            ["old", "1", "Successful"],
        ]
        assert subscribed.stderr.splitlines() == [
            "tidelog groups: error: UNKNOWN_TOPIC_OR_PARTITION: Encounter some partition "
            "level error, see the follow-up details:",
            "hint: check the name with `tidelog topics list`",
        ]
    finally:
        consumer.close()
    assert committed(cli, bs, "g2") == {"live-0": 0, "old-0": 0}
    deleted = cli("groups", "delete-offsets", *bs, "--group", "g2", "--topic", "live")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == [
        "Request succeed for deleting offsets with topic live group g2",
        "",
        "TOPIC  PARTITION  STATUS",
        "live   0          Successful",
    ]


def test_delete_records_and_get_offsets(
    group_broker: BrokerProcess, cli: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", group_broker.bootstrap)
    create_topic(group_broker.bootstrap, "dr", 2)
    produce_timed(group_broker.bootstrap, "dr", 2, 10)

    latest = cli("get-offsets", *bs, "--topic", "d.")
    assert (latest.returncode, latest.stdout) == (0, "dr:0:10\ndr:1:10\n"), latest.stderr

    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "dr", "partition": 0, "offset": 4},
                    {"topic": "dr", "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    deleted = cli("delete-records", *bs, "--offset-json-file", str(offsets))
    assert (deleted.returncode, deleted.stderr) == (0, "")
    assert deleted.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: dr-0\tlow_watermark: 4",
        "partition: dr-1\tlow_watermark: 10",
    ]
    earliest = cli("get-offsets", *bs, "--topic", "dr", "--time", "earliest")
    assert earliest.stdout == "dr:0:4\ndr:1:10\n"
    at = cli(
        "get-offsets", *bs, "--topic", "dr", "--partitions", "0", "--time", str(BASE_MS + 6000)
    )
    assert at.stdout == "dr:0:6\n"
    patterned = cli("get-offsets", *bs, "--topic-partitions", "d.:1-,nothing:0", "--time", "-2")
    assert patterned.stdout == "dr:1:10\n"
    newest = cli("get-offsets", *bs, "--topic", "dr", "--time", "-3")
    assert (newest.stdout, newest.stderr) == ("dr:0:9\n", "")  # dr-1: no record left, no line
    everything = cli("get-offsets", *bs, "--exclude-internal-topics")
    assert everything.returncode == 0
    assert "dr:0:10" in everything.stdout.splitlines()
    assert not any(line.startswith("__") for line in everything.stdout.splitlines())

    offsets.write_text('{"partitions": [{"topic": "dr", "partition": 0, "offset": 99}]}')
    beyond = cli("delete-records", *bs, "--offset-json-file", str(offsets))
    assert beyond.returncode == 1
    assert beyond.stdout.splitlines()[-1] == "partition: dr-0\terror: OFFSET_OUT_OF_RANGE"
    assert beyond.stderr.splitlines() == [
        "tidelog delete-records: error: OFFSET_OUT_OF_RANGE: 1 of 1 partition(s) failed, "
        "first dr-0",
        "hint: the offset must be at most the high watermark (-1 stands for it)",
    ]
    offsets.write_text('{"partitions": [], "version": 3}')
    bad = cli("delete-records", *bs, "--offset-json-file", str(offsets))
    assert (bad.returncode, bad.stderr) == (
        2,
        f"tidelog delete-records: error: --offset-json-file {offsets}: Not supported version "
        "field value 3\n",
    )
    nothing = cli("get-offsets", *bs, "--topic", "no-such-.*")
    assert (nothing.returncode, nothing.stderr) == (
        1,
        "tidelog get-offsets: error: Could not match any topic-partitions with the specified "
        "filters\n",
    )
