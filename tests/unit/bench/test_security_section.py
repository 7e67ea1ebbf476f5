"""`tidelog bench --only security`: its rows, the SASL_SSL ÷ plaintext ratios and the
report text, from hand-made rows (no cluster)."""

from __future__ import annotations

from typing import Any, ClassVar

import confluent_kafka
import pytest

from tidelog.bench import client_settings, runner, security
from tidelog.bench.report import render_markdown
from tidelog.bench.tidelog_rows import CLUSTER_OVERRIDES
from tidelog.cli.bench import SECTION_NAMES


def _row(system: str, workload: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "section": "security",
        "system": system,
        "workload": workload,
        "values": values,
        "note": "",
        "load_average": [0.5, 0.5, 0.5],
    }


def _produce(protocol: str, records_per_s: float, size: int, lost: int = 0) -> dict[str, Any]:
    seconds = 15.0
    records = int(records_per_s * seconds)
    return _row(
        f"tidelog {protocol}",
        f"RF=3 acks=all {'100 B' if size == 100 else '1 KiB'}",
        {
            "protocol": protocol,
            "kind": "produce",
            "record_bytes": size,
            "records": records,
            "sent": records + lost,
            "seconds": seconds,
            "records_per_s": records_per_s,
            "mb_per_s": records_per_s * size / 1e6,
            "broker_cpu_s": 20.0,
            "client_cpu_s": 9.5,
            "machine_busy_percent": 99.0,
            "iowait_percent": 0.5,
            "steal_percent": 0.0,
        },
    )


def _catch_up(protocol: str, records_per_s: float, expected: int, read: int) -> dict[str, Any]:
    return _row(
        f"tidelog {protocol}",
        "catch-up RF=3 100 B",
        {
            "protocol": protocol,
            "kind": "catch-up",
            "record_bytes": 100,
            "records": read,
            "expected": expected,
            "seconds": 10.0,
            "records_per_s": records_per_s,
            "mb_per_s": records_per_s * 100 / 1e6,
            "broker_cpu_s": 5.0,
        },
    )


def _e2e(protocol: str, p50: float, p99: float) -> dict[str, Any]:
    return _row(
        f"tidelog {protocol}",
        "e2e RF=3 acks=all 10000 rec/s",
        {
            "protocol": protocol,
            "kind": "e2e",
            "rate": 10_000,
            "sent": 150_000,
            "received": 150_000,
            "errors": 0,
            "latency_ms": {"p50": p50, "p99": p99, "p99.9": p99 * 2, "max": p99 * 3},
        },
    )


def _connection(protocol: str, **extra: Any) -> dict[str, Any]:
    return _row(
        f"tidelog {protocol}",
        "connection",
        {"protocol": protocol, "kind": "connection", **extra},
    )


def _rows() -> list[dict[str, Any]]:
    return [
        _connection("PLAINTEXT", zero_copy_fetch=True),
        _produce("PLAINTEXT", 1_000_000.0, 100),
        _catch_up("PLAINTEXT", 400_000.0, 15_000_000, 15_000_000),
        _produce("PLAINTEXT", 200_000.0, 1024),
        _e2e("PLAINTEXT", 8.0, 16.0),
        _connection(
            "SASL_SSL",
            zero_copy_fetch=False,
            sasl_mechanism="SCRAM-SHA-512",
            tls_version="TLSv1.3",
            cipher="TLS_AES_256_GCM_SHA384",
            openssl="OpenSSL 3.0.19",
        ),
        _produce("SASL_SSL", 750_000.0, 100, lost=3),
        _catch_up("SASL_SSL", 300_000.0, 11_250_000, 11_249_999),
        _e2e("SASL_SSL", 10.0, 24.0),
    ]


def test_the_section_is_registered_and_runs_last() -> None:
    assert "security" in SECTION_NAMES
    assert set(SECTION_NAMES) == set(runner.SECTIONS)
    assert SECTION_NAMES[-1] == "security"


def test_the_clusters_differ_only_in_security() -> None:
    assert security.MODES == ("plaintext", "sasl_ssl")
    assert security.cluster_overrides("plaintext") == dict(CLUSTER_OVERRIDES)
    assert security.cluster_overrides("sasl_ssl") == {
        **CLUSTER_OVERRIDES,
        "ssl.enabled.protocols": "TLSv1.3",
    }
    assert security.SIZES == (100, 1024)


def test_client_properties_map_to_librdkafka_settings() -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/c/security/pki/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "secret",
    }
    assert security.librdkafka_settings(props) == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/c/security/pki/ca.pem",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "secret",
    }
    assert security.librdkafka_settings({"security.protocol": "PLAINTEXT"}) == {}
    with pytest.raises(ValueError, match="PEM"):
        security.librdkafka_settings({**props, "ssl.truststore.type": "JKS"})


class _Recorder:
    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append(conf)


def test_client_settings_reach_every_producer_and_consumer_then_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(confluent_kafka, "Producer", _Recorder)
    monkeypatch.setattr(confluent_kafka, "Consumer", _Recorder)
    _Recorder.made = []
    settings = {"security.protocol": "SASL_SSL", "sasl.username": "admin"}
    with client_settings.client_settings(settings):
        from confluent_kafka import Consumer, Producer

        Producer({"bootstrap.servers": "b:1", "acks": "all"})
        Consumer({"bootstrap.servers": "b:1", "group.id": "g"})
    assert _Recorder.made == [
        {"bootstrap.servers": "b:1", "acks": "all", **settings},
        {"bootstrap.servers": "b:1", "group.id": "g", **settings},
    ]
    names = vars(confluent_kafka)
    assert names["Producer"] is _Recorder
    assert names["Consumer"] is _Recorder
    with client_settings.client_settings({}):
        assert names["Producer"] is _Recorder


def _worker(bootstrap: str) -> dict[str, Any]:
    from confluent_kafka import Producer

    return {"made": Producer({"bootstrap.servers": bootstrap})}


def test_run_with_settings_runs_the_worker_with_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confluent_kafka, "Producer", _Recorder)
    _Recorder.made = []
    client_settings.run_with_settings({"sasl.username": "admin"}, _worker, "b:1")
    assert _Recorder.made == [{"bootstrap.servers": "b:1", "sasl.username": "admin"}]


def test_each_workload_is_compared_sasl_ssl_over_plaintext() -> None:
    pairs = security.comparisons(_rows())
    assert [(p["workload"], p["kind"]) for p in pairs] == [
        ("RF=3 acks=all 100 B", "produce"),
        ("catch-up RF=3 100 B", "catch-up"),
        ("e2e RF=3 acks=all 10000 rec/s", "e2e"),
    ]  # the 1 KiB row was measured on plaintext only
    produce, catch_up, e2e = pairs
    assert produce["ratio"] == pytest.approx(0.75)
    assert produce["plaintext"]["records_per_s"] == 1_000_000.0
    assert produce["sasl_ssl"]["records_per_s"] == 750_000.0
    assert catch_up["ratio"] == pytest.approx(0.75)
    assert e2e["ratio"] == pytest.approx(1.5)  # p99 latency
    assert e2e["p50_ratio"] == pytest.approx(1.25)
    assert security.connections(_rows())["SASL_SSL"]["tls_version"] == "TLSv1.3"


def test_a_zero_plaintext_figure_has_no_ratio() -> None:
    rows = [_produce("PLAINTEXT", 0.0, 100), _produce("SASL_SSL", 5.0, 100)]
    (pair,) = security.comparisons(rows)
    assert pair["ratio"] is None


def test_report_sets_sasl_ssl_beside_plaintext_and_names_what_ran() -> None:
    data = {
        "command": "tidelog bench --only security",
        "elapsed_s": 500.0,
        "load_at_start": [0.1, 0.1, 0.1],
        "load_at_end": [1.0, 1.0, 1.0],
        "machine": {
            "started_utc": "2026-11-26T04:00:00Z",
            "cpus": 2,
            "cpu_model": "cpu",
            "memory_bytes": 2**30,
            "kernel": "k",
            "python": "3.11",
        },
        "rows": _rows(),
        "skipped": [],
    }
    text = render_markdown(data)
    assert "## SASL_SSL beside plaintext (RF=3, acks=all, min.insync.replicas=2)" in text
    assert "| RF=3 acks=all 100 B | 1,000,000 | 100.0 | 750,000 | 75.0 | 0.75× | 0 / 3 |" in text
    assert "| RF=3 acks=all 100 B | 20.0 / 9.5 / 99 % / 0 % | 20.0 / 9.5 / 99 % / 0 % |" in text
    # A figure the row does not have is a dash, not a made-up number.
    assert "| catch-up RF=3 100 B | 5.0 / — / — % / — % | 5.0 / — / — % / — % |" in text
    assert "| catch-up RF=3 100 B | 400,000 | 40.0 | 300,000 | 30.0 | 0.75× | 0 / 1 |" in text
    assert (
        "| e2e RF=3 acks=all 10000 rec/s | 8.0 / 16.0 / 32.0 | 10.0 / 24.0 / 48.0 | "
        "1.25×, 1.50× | plain 150,000 of 150,000, SASL_SSL 150,000 of 150,000 |"
    ) in text
    assert "SASL_SSL negotiated TLSv1.3 (TLS_AES_256_GCM_SHA384" in text
    assert "SASL SCRAM-SHA-512 login" in text
    assert "sendfile (zero-copy) on plaintext connections only" in text
    assert "Measured on one protocol only: RF=3 acks=all 1 KiB." in text
    # Not in the produce or e2e tables, nor in the issue-8 targets.
    assert "## Produce throughput" not in text
    assert "## Targets" not in text
