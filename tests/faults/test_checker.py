"""The checker on hand-made histories: each kind of anomaly is reported, and a clean
history reports nothing; a client-visible error fails the run and shows in the report
(issue 18). Unit tests: no processes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tidelog.client import Record, build_batch
from tidelog.testing.faults import __main__ as faults_main
from tidelog.testing.faults.checker import (
    check_histories,
    check_replicas,
    committed_batches,
    unavailability,
)
from tidelog.testing.faults.nemesis import (
    ALL_KINDS,
    MIXES,
    RESTART_KINDS,
    FaultRecord,
    Nemesis,
)
from tidelog.testing.faults.run import (
    ClientStats,
    RunConfig,
    RunResult,
    client_stats,
    describe_error,
    error_notes,
    render_report,
    when,
)
from tidelog.testing.faults.workload import Ack, ClientError, ProducerHistory, Read


def _ack(p: int, o: int, v: bytes, at: float = 0.0) -> Ack:
    return Ack(0, p, o, v, at)


def _read(who: str, p: int, o: int, v: bytes) -> Read:
    return Read(who, p, o, v, 0.0)


FINAL = [_read("final", 0, o, b"p0-%d" % o) for o in range(5)]
HW = {0: 5}


def test_a_clean_history_has_no_findings() -> None:
    acks = [_ack(0, o, b"p0-%d" % o) for o in range(5)]
    reads = [_read("c0", 0, o, b"p0-%d" % o) for o in range(3)]
    f = check_histories(acks, reads, FINAL, HW)
    assert f.ok
    assert f.failures == {}
    assert f.lost_count == 0
    assert f.acknowledged == 5


def test_lost_and_moved_acknowledgements() -> None:
    acks = [_ack(0, 9, b"p0-9"), _ack(0, 4, b"p0-3")]
    f = check_histories(acks, [], FINAL, HW)
    assert f.lost_values == [b"p0-9"]
    assert f.lost_count == 1
    assert len(f.moved) == 1
    assert "stored at [(0, 3)]" in f.moved[0]
    assert not f.ok


def test_vanished_and_inconsistent_reads() -> None:
    reads = [_read("c0", 0, 2, b"other"), _read("c1", 0, 7, b"p0-7")]
    f = check_histories([], reads, FINAL, HW)
    assert len(f.inconsistent) == 1
    assert "c0 saw b'other'" in f.inconsistent[0]
    assert len(f.vanished) == 1
    assert "above the final hw 5" in f.vanished[0]


def test_reordered_reads_and_producer_order_and_duplicates() -> None:
    reads = [_read("c0", 0, 3, b"p0-3"), _read("c0", 0, 1, b"p0-1")]
    final = [
        _read("final", 0, 0, b"p0-0"),
        _read("final", 0, 1, b"p0-2"),
        _read("final", 0, 2, b"p0-1"),
        _read("final", 0, 3, b"p0-2"),
    ]
    f = check_histories([], reads, final, {0: 4})
    assert any("c0 read 0/1 after 3" in r for r in f.reordered)
    assert any("seq 1 at offset 2 after seq 2" in r for r in f.reordered)
    # The second copy of p0-2 is a duplicate, not a reordering.
    assert f.duplicated == ["b'p0-2' at [(0, 1), (0, 3)]"]
    assert len(f.reordered) == 2


def test_incomplete_final_read() -> None:
    f = check_histories([], [], FINAL[:3], HW)
    assert f.incomplete == ["partition 0: final read got 3 of 5 offsets"]


def _segment(directory: Path, *batches: bytes) -> None:
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(batches))


def test_replicas_compared_below_the_hw_only(tmp_path: Path) -> None:
    b0 = build_batch([Record(b"a"), Record(b"b")], base_offset=0, base_timestamp_ms=1)
    b2 = build_batch([Record(b"c")], base_offset=2, base_timestamp_ms=1)
    other = build_batch([Record(b"X")], base_offset=2, base_timestamp_ms=1)
    _segment(tmp_path / "1" / "t-0", b0, b2)
    _segment(tmp_path / "2" / "t-0", b0, other)  # differs at offset 2 only
    _segment(tmp_path / "3" / "t-0", b0, b2[:20])  # a torn tail after offset 1
    dirs = {b: tmp_path / str(b) for b in (1, 2, 3)}
    assert committed_batches(dirs[3] / "t-0", 10) == [b0]
    assert check_replicas(dirs, "t", {0: 2}, {0: [1, 2, 3]}) == []
    problems = check_replicas(dirs, "t", {0: 3}, {0: [1, 2, 3]})
    assert problems == [
        "partition 0: broker 2 has 2 batches below hw 3, broker 1 2; first difference at batch 1",
        "partition 0: broker 3 has 1 batches below hw 3, broker 1 2; first difference at batch 1",
    ]


def test_unavailability_is_the_longest_gap_without_acks() -> None:
    gaps = unavailability([1.0, 2.0, 6.0, 6.5], [("kill", 0.5, 7.0), ("pause", 6.6, 9.0)])
    assert [k for k, _ in gaps] == ["kill", "pause"]
    assert [g for _, g in gaps] == pytest.approx([4.0, 2.4])


def test_producer_order_is_informational_without_idempotence() -> None:
    final = [_read("final", 0, 0, b"p0-2"), _read("final", 0, 1, b"p0-1")]
    strict = check_histories([], [], final, {0: 2})
    assert strict.reordered
    assert not strict.ok
    loose = check_histories([], [], final, {0: 2}, producer_order_guaranteed=False)
    assert loose.reordered == []
    assert loose.producer_reordered == [
        "partition 0: producer 0 seq 1 at offset 1 after seq 2 at offset 0"
    ]
    assert loose.ok
    assert "producer_reordered (not idempotent, not a failure): 1" in loose.summary()


# --- issue 18: client-visible errors in the verdict, the report and the exit status --------


def _result_with_one_client_visible_error() -> RunResult:
    fault = FaultRecord(0, "kill_restart_fast", 2, 10.0, 12.0, 15.0, True, "SIGKILL + start")
    error = ClientError(
        "confluent-kafka",
        "producer 0",
        "produce()",
        "KafkaException: KafkaError{code=_UNKNOWN_TOPIC,val=-188}",
        13.5,
    )
    findings = check_histories([_ack(0, o, b"p0-%d" % o) for o in range(5)], [], FINAL, HW)
    findings.client_visible.append(describe_error(error, 0.0, [fault]))
    return RunResult(
        config=RunConfig(faults=1, seed=3),
        findings=findings,
        faults=[fault],
        unavailable=[("kill_restart_fast", 2.0)],
        sent=7,
        failed_deliveries=1,
        clients=[
            ClientStats("confluent-kafka", 2, 5, 5, 0, 1),
            ClientStats("kafka-python", 1, 1, 0, 1, 0),
            ClientStats("aiokafka", 1, 1, 0, 0, 0),
        ],
        client_errors=[error],
        notes=error_notes([error], 0.0, [fault]),
    )


def test_a_client_visible_error_fails_the_run() -> None:
    result = _result_with_one_client_visible_error()
    f = result.findings
    assert f.lost_count == 0
    assert not f.ok
    assert list(f.failures) == ["client_visible"]
    assert f.client_visible == [
        "confluent-kafka producer 0, produce(), t+13.5s (during fault 0 (kill_restart_fast, "
        "broker 2)): KafkaException: KafkaError{code=_UNKNOWN_TOPIC,val=-188}"
    ]
    assert f.summary().startswith("acknowledged 5, lost 0, client-visible errors 1\n")


def test_the_command_line_exits_1_on_a_client_visible_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[RunConfig] = []

    def fake_run(config: RunConfig, log: object = None) -> RunResult:
        seen.append(config)
        return _result_with_one_client_visible_error()

    monkeypatch.setattr(faults_main, "run", fake_run)
    report = tmp_path / "r.md"
    argv = ["--mix", "restarts", "--faults", "1", "--report", str(report)]
    assert faults_main.main(argv) == 1
    assert seen[0].kinds == RESTART_KINDS
    assert "| **client-visible errors (an application would stop)** | **1** |" in (
        report.read_text(encoding="utf-8")
    )
    with pytest.raises(SystemExit):
        faults_main.main(["--mix", "restarts", "--kinds", "kill_leader"])


def test_the_report_shows_client_visible_errors_beside_the_lost_records() -> None:
    text = render_report(_result_with_one_client_visible_error(), "cmd", code="abc")
    lines = text.splitlines()
    lost = lines.index("| **acknowledged records lost** | **0** |")
    assert lines[lost + 1] == "| **client-visible errors (an application would stop)** | **1** |"
    assert "| confluent-kafka | 2 | 5 | 5 | 0 | 1 |" in lines
    assert "| kafka-python | 1 | 1 | 0 | 1 | 0 |" in lines
    assert "| aiokafka | 1 | 1 | 0 | 0 | 0 |" in lines
    notes = text.split("## Notes", 1)[1].split("## How it works", 1)[0]
    assert "**1 client-visible errors** (an application would stop): confluent-kafka 1" in notes
    assert "code=_UNKNOWN_TOPIC" in notes
    assert "**Client-visible errors** (issue 18)" in text
    assert "| kill_restart_fast | 1 | 2.0 | 0 |" in lines


def test_client_stats_sum_each_clients_producers() -> None:
    histories = [
        ProducerHistory(0, sent=3, acks=[_ack(0, 0, b"p0-0")], client="confluent-kafka"),
        ProducerHistory(1, sent=2, failed=[(b"p1-0", "t", 0.0)], client="confluent-kafka"),
        ProducerHistory(2, sent=1, client="aiokafka"),
    ]
    histories[2].visible.append(ClientError("aiokafka", "producer 2", "send()", "x", 0.0))
    workers = [SimpleNamespace(history=h) for h in histories]
    assert client_stats(workers) == [
        ClientStats("confluent-kafka", 2, 5, 1, 1, 0),
        ClientStats("kafka-python", 0, 0, 0, 0, 0),
        ClientStats("aiokafka", 1, 1, 0, 0, 1),
    ]


def test_when_places_an_error_in_the_fault_schedule() -> None:
    fault = FaultRecord(3, "pause_long", 1, 10.0, 19.0, 21.0, True, "SIGSTOP 9.0s")
    assert when(5.0, [fault]) == "before the first fault"
    assert when(20.0, [fault]) == "during fault 3 (pause_long, broker 1)"
    assert when(22.5, [fault]) == "1.5s after fault 3 (pause_long) healed"


def test_the_restarts_mix_names_kinds_the_nemesis_has() -> None:
    assert set(RESTART_KINDS) <= set(ALL_KINDS)
    assert MIXES["all"] == ALL_KINDS
    for kind in ALL_KINDS:
        assert callable(getattr(Nemesis, f"_{kind}", None)), kind
