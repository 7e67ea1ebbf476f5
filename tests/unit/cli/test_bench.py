"""`tidelog bench`: argument errors the user sees, and the report built from results."""

from __future__ import annotations

import subprocess
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest

from tidelog.bench.common import Latency, percentile
from tidelog.bench.report import render_markdown, transaction_cost
from tidelog.bench.transactions import summarise_read_committed, summarise_transactions
from tidelog.cli.main import main


def test_unknown_section_is_refused_with_the_list_of_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--only", "produce,nope", "--output", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "unknown section(s): nope" in err
    assert "limits, produce, compression, e2e, transactions, peers, failover" in err
    assert not (tmp_path / "results.json").exists()


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile(values, 0.5) == 500.0
    assert percentile(values, 0.99) == 990.0
    assert percentile(values, 0.999) == 999.0
    assert percentile([], 0.5) == 0.0
    lat = Latency.of_seconds([0.002, 0.001, 0.003])
    assert (lat.count, lat.p50_ms, lat.max_ms) == (3, 2.0, 3.0)


def _row(section: str, system: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": section,
        "system": system,
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [1.0, 1.0, 1.0],
    }


def test_report_states_targets_met_and_missed_and_what_was_not_measured() -> None:
    lat = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p99.9": 4.0, "max": 5.0}
    data = {
        "command": "tidelog bench",
        "elapsed_s": 10.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "load_at_end": [2.0, 2.0, 2.0],
        "machine": {
            "started_utc": "2026-11-22T00:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": [
            _row(
                "produce",
                "tidelog",
                "RF=3 acks=all 100 B",
                {
                    "records_per_s": 350_000.0,
                    "mb_per_s": 35.0,
                    "record_bytes": 100,
                    "latency_ms": lat,
                },
            ),
            _row(
                "produce",
                "tidelog",
                "RF=3 acks=all 64 KiB",
                {
                    "records_per_s": 2_000.0,
                    "mb_per_s": 150.0,
                    "record_bytes": 65536,
                    "latency_ms": lat,
                },
            ),
            _row(
                "limits",
                "machine",
                "same bytes written 3x to one disk by three processes in parallel",
                {"payload_mb_s": 300.0, "disk_mb_s": 900.0},
            ),
            _row(
                "limits",
                "machine",
                "same bytes written 3x to one disk by three processes in parallel (page cache "
                "kept to the last 64 MiB as a broker does)",
                {"payload_mb_s": 1200.0, "disk_mb_s": 3600.0},
            ),
            _row(
                "produce",
                "NATS JetStream R3",
                "R3 publish_async 100 B",
                {
                    "records_per_s": 500_000.0,
                    "mb_per_s": 50.0,
                    "record_bytes": 100,
                    "latency_ms": lat,
                },
            ),
        ],
        "skipped": [{"section": "peer rabbitmq", "reason": "apt-get install failed"}],
    }
    text = render_markdown(data)
    assert "| acks=all RF=3 100 B ≥ 300,000 records/s | 350,000 | yes |" in text
    assert "| ahead of NATS JetStream R3 at 100 B | 35.0 vs 50.0 MB/s (0.70×) | **no** |" in text
    assert "- **peer rabbitmq**: apt-get install failed" in text
    assert (
        "| acks=all RF=3 64 KiB ≥ 200 MB/s | 150.0 MB/s (50% of this run's three-copy ceiling,"
        " 300; 12% of this run's three-copy ceiling written as the brokers write, 1,200)"
        " | **no** |" in text
    )
    assert "| same bytes written 3x to one disk by three processes in parallel | 300 MB/s" in text


def test_a_writing_row_waits_until_freed_memory_has_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tidelog.bench import common

    slept: list[float] = []
    synced: list[bool] = []
    clock = [1000.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(common.time, "sleep", slept.append)
    monkeypatch.setattr(common.os, "sync", lambda: synced.append(True))
    monkeypatch.setattr(common, "_last_freed", 0.0)

    assert common.settle() == {"sync_s": 0.0, "waited_s": 0.0}  # nothing freed yet
    common.note_freed()
    clock[0] += 12.0
    assert common.settle()["waited_s"] == common.SETTLE_AFTER_FREE_S - 12.0
    clock[0] += common.SETTLE_AFTER_FREE_S
    assert common.settle()["waited_s"] == 0.0  # long enough ago
    assert slept == [common.SETTLE_AFTER_FREE_S - 12.0, 0.0]
    assert synced == [True, True, True]  # dirty pages written back before every row


def _raw(*seconds: float) -> bytes:
    return array("d", seconds).tobytes()


def _producer_result(**values: Any) -> dict[str, Any]:
    result = {
        "transactional": True,
        "records": 0,
        "sent": 0,
        "transactions": 0,
        "failed_transactions": 0,
        "errors": 0,
        "first_errors": [],
        "unflushed": 0,
        "elapsed": 1.0,
        "latencies": b"",
        "commit_latencies": b"",
    }
    result.update(values)
    return result


def test_transactional_producers_are_summed_over_the_longest_one() -> None:
    results = [
        _producer_result(
            records=3000,
            sent=3000,
            transactions=3,
            elapsed=2.0,
            latencies=_raw(0.001, 0.002, 0.003),
            commit_latencies=_raw(0.010, 0.030, 0.020),
        ),
        _producer_result(
            records=1000,
            sent=2000,
            transactions=1,
            failed_transactions=1,
            errors=1,
            first_errors=["aborted: timed out"],
            elapsed=1.5,
            commit_latencies=_raw(0.040),
        ),
    ]
    v = summarise_transactions(results, 100)
    assert (v["records"], v["sent"], v["transactions"], v["seconds"]) == (4000, 5000, 4, 2.0)
    assert (v["records_per_s"], v["mb_per_s"], v["transactions_per_s"]) == (2000.0, 0.2, 2.0)
    assert (v["failed_transactions"], v["errors"]) == (1, 1)
    assert v["first_errors"] == ["aborted: timed out"]
    assert v["commit_latency_ms"]["p50"] == pytest.approx(20.0)
    assert v["commit_latency_ms"]["max"] == pytest.approx(40.0)
    assert v["latency_ms"]["p50"] == pytest.approx(2.0)


def test_an_idempotent_producer_has_no_commit_latency() -> None:
    v = summarise_transactions(
        [_producer_result(transactional=False, records=500, sent=500, latencies=_raw(0.004))],
        100,
    )
    assert (v["records_per_s"], v["transactions_per_s"]) == (500.0, 0.0)
    assert v["commit_latency_ms"] is None


def test_read_committed_latency_drops_the_first_second() -> None:
    sent = {
        "sent": 40,
        "committed": 40,
        "transactions": 4,
        "failed_transactions": 0,
        "errors": 0,
        "first_errors": [],
        "elapsed": 4.0,
        "commit_latencies": _raw(0.002, 0.004, 0.006, 0.008),
        "schedule_lags": _raw(*([0.0] * 39 + [0.005])),
    }
    # At 10 records/s the first 10 received are warm-up (1 s each, left out).
    got = {"received": 40, "latencies": _raw(*([1.0] * 10 + [0.010] * 29 + [0.050]))}
    v = summarise_read_committed(sent, got, 10)
    assert (v["measured"], v["achieved_rate"], v["received"], v["sent"]) == (30, 10.0, 40, 40)
    assert v["latency_ms"]["p50"] == pytest.approx(10.0)
    assert v["latency_ms"]["max"] == pytest.approx(50.0)
    assert v["commit_latency_ms"]["max"] == pytest.approx(8.0)
    assert v["schedule_lag_ms"]["p50"] == 0.0
    assert v["schedule_lag_ms"]["max"] == pytest.approx(5.0)


def test_report_shows_the_cost_of_transactions_and_the_read_committed_row() -> None:
    commit = {"avg": 9.0, "p50": 8.0, "p95": 11.0, "p99": 12.0, "p99.9": 13.0, "max": 14.0}
    lat = {"avg": 1.0, "p50": 1.0, "p95": 2.0, "p99": 3.0, "p99.9": 4.0, "max": 5.0}
    common = {"mb_per_s": 1.0, "errors": 0, "latency_ms": lat, "record_bytes": 100}
    idempotent = _row(
        "transactions",
        "tidelog",
        "RF=3 idempotent 100 B",
        {
            **common,
            "mode": "idempotent",
            "records_per_s": 200_000.0,
            "transactions_per_s": 0.0,
            "commit_latency_ms": None,
        },
    )
    transactional = _row(
        "transactions",
        "tidelog",
        "RF=3 transactions of 1,000 × 100 B",
        {
            **common,
            "mode": "transactional",
            "records_per_transaction": 1000,
            "records_per_s": 150_000.0,
            "transactions_per_s": 150.0,
            "commit_latency_ms": commit,
        },
    )
    transactional["note"] = "commit latency is the time commit_transaction() took"
    e2e = _row(
        "e2e",
        "tidelog",
        "RF=3 read_committed, transactions of 10, 1000 rec/s",
        {"received": 10, "sent": 10, "latency_ms": lat},
    )
    assert transaction_cost([idempotent, transactional]) == (
        "tidelog transactions of 1,000 ÷ idempotent: 0.75× records/s (150,000 vs 200,000)"
    )
    assert transaction_cost([transactional]) is None
    data = {
        "command": "tidelog bench --only transactions",
        "elapsed_s": 10.0,
        "load_at_start": [1.0, 1.0, 1.0],
        "load_at_end": [2.0, 2.0, 2.0],
        "machine": {
            "started_utc": "2026-11-22T00:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": [idempotent, transactional, e2e],
        "skipped": [],
    }
    text = render_markdown(data)
    assert (
        "| tidelog | RF=3 transactions of 1,000 × 100 B | 150,000 | 1.0 | 150.0 | 8.0 | 12.0 "
        "| 14.0 | 1.0 | 3.0 | 0 | 1.00 1.00 1.00 |" in text
    )
    assert "| tidelog | RF=3 idempotent 100 B | 200,000 | 1.0 | — | — | — | — |" in text
    assert "Same-run ratio: tidelog transactions of 1,000 ÷ idempotent: 0.75×" in text
    assert "| tidelog | RF=3 read_committed, transactions of 10, 1000 rec/s | 10/10 |" in text
    assert "librdkafka's default isolation.level, read_committed" in text
    assert "- tidelog transactions: commit latency is the time commit_transaction() took" in text


# --- --bootstrap-server: options refused before anything is sent -----------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--command-config", "c.properties"], "--command-config: only with --bootstrap-server"),
        (
            ["--replication-factor", "2", "--topic-prefix", "x-"],
            "--replication-factor, --topic-prefix: only with --bootstrap-server",
        ),
    ],
)
def test_cluster_options_need_a_bootstrap_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["bench", "--only", "limits", "--output", str(tmp_path), *extra]) == 2
    assert capsys.readouterr().err == f"tidelog bench: error: {message}\n"
    assert not (tmp_path / "results.json").exists()


# Port 1 on loopback: nothing listens, and none of these cases may get as far as trying.
_EXTERNAL = ["bench", "--bootstrap-server", "127.0.0.1:1"]


@pytest.mark.parametrize(
    ("extra", "lines"),
    [
        (
            ["--only", "produce,peers,failover"],
            [
                "tidelog bench: error: --only peers,failover: not with --bootstrap-server "
                "(these sections start clusters of their own)",
                "hint: with --bootstrap-server: limits, produce, e2e",
            ],
        ),
        (
            ["--replication-factor", "0"],
            ["tidelog bench: error: --replication-factor 0: must be at least 1"],
        ),
        (["--partitions", "-1"], ["tidelog bench: error: --partitions -1: must be at least 1"]),
        (
            ["--topic-prefix", "bench/"],
            [
                "tidelog bench: error: INVALID_TOPIC_EXCEPTION: --topic-prefix 'bench/': Topic "
                'name "bench/00000000-produce-acks-all-100" is illegal, it contains a '
                "character other than ASCII alphanumerics, '.', '_' and '-'",
                "hint: topic names use ASCII letters, digits, '.', '_' and '-', at most 249 "
                "characters",
            ],
        ),
    ],
)
def test_bad_bench_options_are_refused_before_the_cluster_is_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], lines: list[str]
) -> None:
    argv = [*_EXTERNAL, "--sizes", "100", "--output", str(tmp_path), *extra]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == lines
    assert not (tmp_path / "results.json").exists()


def test_a_bad_command_config_is_one_line_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    missing = tmp_path / "nope.properties"
    assert main([*_EXTERNAL, "--output", str(out), "--command-config", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"tidelog bench: error: --command-config {missing}: no such file\n"
    )
    no_login = tmp_path / "client.properties"
    no_login.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n")
    assert main([*_EXTERNAL, "--output", str(out), "--command-config", str(no_login)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"tidelog bench: error: --command-config {no_login}: sasl.username: ")
    assert not out.exists()


def test_a_sigterm_ends_the_bench_through_its_cleanup(tmp_path: Path) -> None:
    """A real process: SIGTERM inside ``sigterm_exits`` runs the ``finally`` blocks (where
    the bench stops its clusters) and exits 143; a second SIGTERM during the cleanup does
    not cut it short; the previous handler is back afterwards."""
    script = tmp_path / "bench_like.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from tidelog.cli.bench import sigterm_exits\n"
        "try:\n"
        "    with sigterm_exits():\n"
        "        try:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "            time.sleep(30)\n"
        "        finally:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)  # a second one, ignored\n"
        "            time.sleep(0.2)\n"
        "            print('clusters stopped', flush=True)\n"
        "finally:\n"
        "    print('restored', signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 143
    assert done.stdout.splitlines() == ["clusters stopped", "restored True"]
