"""The security rows (issue 20): what SASL_SSL costs beside plaintext, from one run.

Two three-broker clusters, one after the other (never both at once), the same in all but
their security: ``security="plaintext"`` and ``security="sasl_ssl"`` (one SASL_SSL
listener per broker, used by the clients and by the brokers themselves, who log in to each
other with SCRAM-SHA-512; the ACL authorizer on; the bench's clients log in as the
``admin`` super user with SCRAM-SHA-512 and trust the cluster's CA). Both have the bench's
``CLUSTER_OVERRIDES``. On each, the same rows as the tidelog RF=3 acks=all rows of the
produce and e2e sections, with the same workers:

- produce, RF=3 acks=all (min.insync.replicas=2), 100 B and 1 KiB records, 3 partitions,
  ``seconds`` per row, ``producers`` producer processes (``kafka.produce_worker``);
- catch-up: a fresh consumer over the backlog that row left (``kafka.catch_up_worker``),
  which is where zero-copy matters: tidelog sends fetch data with ``os.sendfile`` on
  plaintext connections only (TLS must copy every byte through the cipher);
- end-to-end: acks=all producer at a fixed 10,000 records/s of 100 B, latency from send
  to a consumer's hands (``kafka.fixed_rate_producer`` + ``kafka.e2e_consumer_worker``).

Every row that writes starts settled (``common.settle``). The report sets each SASL_SSL
row beside its plaintext row with the ratio. The workers take a bootstrap address only, so
:func:`run_with_settings` runs them with the cluster's client settings merged into every
confluent-kafka Producer and Consumer they make (:func:`client_settings`): the code
measured is the code of the existing rows, on both clusters. The SASL_SSL brokers accept
TLS 1.3 only (``TLS_OVERRIDES``), so every connection that works is TLS 1.3. A
``connection`` row per cluster records what was negotiated (TLS version and cipher, seen
by a Python ``ssl`` client with the bench's trust settings); the brokers' CPU seconds
over each row are in the rows' values.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import multiprocessing
import socket
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tidelog.bench.client_conf import librdkafka_settings
from tidelog.bench.client_settings import run_with_settings
from tidelog.bench.common import MB, Row, cpu_seconds, remove_data, settle
from tidelog.bench.e2e import e2e_line, measure_e2e
from tidelog.bench.kafka import (
    catch_up_worker,
    perf_test_line,
    produce_worker,
    summarise_produce,
)
from tidelog.bench.launch import Cluster, ClusterFactory, Launcher
from tidelog.bench.tidelog_rows import CLUSTER_OVERRIDES, not_ready

Say = Callable[[str], None]

SECTION: Final = "security"
#: The two clusters, in the order they run.
MODES: Final = ("plaintext", "sasl_ssl")
PLAINTEXT: Final = "PLAINTEXT"
SASL_SSL: Final = "SASL_SSL"
#: Record sizes of the produce rows (the produce section's first two).
SIZES: Final = (100, 1024)
#: Records/s of the end-to-end row (issue 8's latency target rate); 100 B records.
E2E_RATE: Final = 10_000
PARTITIONS: Final = 3
#: Broker settings of the SASL_SSL cluster besides the bench's CLUSTER_OVERRIDES.
TLS_OVERRIDES: Final = {"ssl.enabled.protocols": "TLSv1.3"}
#: What the bench's clients do on SASL_SSL, for the report.
WHAT_RAN: Final = (
    "SASL_SSL listeners (TLS 1.3 only) for clients and between brokers (the followers' "
    "fetches are TLS too); clients and brokers log in with SCRAM-SHA-512 as the admin super "
    "user; the ACL authorizer is on. tidelog sends fetch data with sendfile (zero-copy) on "
    "plaintext connections only: under TLS every fetched byte is read into memory and "
    "encrypted, and every byte either way goes through the cipher."
)


def cluster_settings(cluster: Cluster, client_properties: str) -> dict[str, str]:
    """librdkafka settings for ``cluster``'s admin, from the file ``client_properties`` in
    its directory (empty for a plaintext cluster)."""
    if cluster.security is None:
        return {}
    from tidelog.server.config.broker_config import parse_properties

    text = (cluster.directory / client_properties).read_text(encoding="utf-8")
    return librdkafka_settings(parse_properties(text))


def create_topic(
    settings: Mapping[str, str], bootstrap: str, name: str, timeout_s: float = 120
) -> None:
    """``tidelog_rows.create_topic`` with the cluster's client settings: an RF=3 topic of
    PARTITIONS partitions, min.insync.replicas=2, waited for until Metadata shows every
    partition led with a full ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({**settings, "bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[name].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    why = not_ready(admin, name, PARTITIONS, 3, frozenset())
    while why is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name}: not all led with a full ISR in {timeout_s}s: {why}")
        time.sleep(0.1)
        why = not_ready(admin, name, PARTITIONS, 3, frozenset())


def _in_process(settings: Mapping[str, str], fn: Callable[..., dict[str, Any]], *args: Any) -> Any:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(run_with_settings, (dict(settings), fn, *args))


def _broker_pids(cluster: Cluster) -> list[int]:
    state = cluster.state
    return [b.pid for b in state.brokers if b.pid] if state else []


def machine_cpu() -> tuple[float, float, float, float]:
    """(busy, iowait, steal, total) CPU ticks of the whole machine so far, from /proc/stat:
    busy is all but idle and iowait (steal included), iowait idle with disk reads or writes
    outstanding, steal what the hypervisor gave elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0, 0.0, 0.0
    idle, iowait, steal = fields[3], fields[4], fields[7]
    total = sum(fields)
    return total - idle - iowait, iowait, steal, total


class CpuMeter:
    """CPU used from construction to :meth:`values`: the brokers' CPU seconds, and the
    shares of the machine's CPU time busy, waiting for the disk, and stolen meanwhile."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self.broker = sum(cpu_seconds(p) for p in self.pids)
        self.machine = machine_cpu()

    def values(self) -> dict[str, float]:
        now = machine_cpu()
        span = now[3] - self.machine[3]

        def share(i: int) -> float:
            return round(100 * (now[i] - self.machine[i]) / span, 1) if span else 0.0

        return {
            "broker_cpu_s": round(sum(cpu_seconds(p) for p in self.pids) - self.broker, 2),
            "machine_busy_percent": share(0),
            "iowait_percent": share(1),
            "steal_percent": share(2),
        }


def tls_probe(host: str, port: int, context: ssl.SSLContext | None) -> dict[str, Any]:
    """The TLS version and cipher a client with ``context`` negotiates with a broker (a
    Python ``ssl`` connection: OpenSSL, as librdkafka); empty without TLS."""
    if context is None:
        return {}
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cipher = tls.cipher()
        return {
            "tls_version": tls.version(),
            "cipher": cipher[0] if cipher else None,
            "openssl": ssl.OPENSSL_VERSION,
        }


def cluster_overrides(mode: str) -> dict[str, str]:
    """The bench's broker settings, and on TLS only TLS 1.3 (the brokers' default also
    accepts 1.2; librdkafka does not log what it negotiated, so the brokers allow no other)."""
    overrides = dict(CLUSTER_OVERRIDES)
    if mode in ("ssl", "sasl_ssl"):
        overrides.update(TLS_OVERRIDES)
    return overrides


def start_cluster(launch: ClusterFactory, directory: Path, mode: str) -> Cluster:
    return launch(directory, brokers=3, overrides=cluster_overrides(mode), security=mode).start(
        timeout_s=120
    )


def cluster_rows(
    launcher: Launcher,
    directory: Path,
    mode: str,
    sizes: Sequence[int],
    seconds: float,
    producers: int,
    e2e_seconds: float,
    say: Say,
    *,
    remove: bool = True,
) -> list[Row]:
    """Start a ``mode`` cluster, measure its rows, stop it and (``remove``) delete its
    data."""
    rows: list[Row] = []
    cluster = start_cluster(launcher.cluster, directory, mode)
    try:
        settings = cluster_settings(cluster, launcher.client_properties)
        protocol = settings.get("security.protocol", PLAINTEXT).upper()
        system = f"tidelog {protocol}"
        bootstrap = cluster.bootstrap_servers
        first = cluster.state.brokers[0] if cluster.state else None
        assert first is not None
        info: dict[str, Any] = {
            "protocol": protocol,
            "kind": "connection",
            "sasl_mechanism": settings.get("sasl.mechanisms"),
            "zero_copy_fetch": protocol == PLAINTEXT,
            "overrides": cluster_overrides(mode),
            **tls_probe("127.0.0.1", first.port, cluster.client_security().ssl_context),
        }
        rows.append(Row(SECTION, system, "connection", info))
        say(f"{system}: {info}")
        pids = _broker_pids(cluster)
        for size in sizes:
            rows += _produce_and_catch_up(
                settings, bootstrap, system, protocol, size, seconds, producers, pids, say
            )
        rows.append(_e2e(settings, bootstrap, system, protocol, e2e_seconds, pids, say))
    finally:
        cluster.stop()
        if remove:
            remove_data(directory)
    return rows


def _produce_and_catch_up(
    settings: Mapping[str, str],
    bootstrap: str,
    system: str,
    protocol: str,
    size: int,
    seconds: float,
    producers: int,
    pids: Sequence[int],
    say: Say,
) -> list[Row]:
    topic = f"security-rf3-{size}"
    create_topic(settings, bootstrap, topic)
    parts = list(range(PARTITIONS))
    args = [
        (dict(settings), produce_worker, bootstrap, topic, size, seconds, "all", parts)
        for _ in range(producers)
    ]
    settled = settle()
    meter = CpuMeter(pids)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(len(args)) as pool:
        results = pool.starmap(run_with_settings, args)
    cpu = meter.values()
    values = summarise_produce(results, size)
    values.update(
        protocol=protocol,
        kind="produce",
        record_bytes=size,
        partitions=PARTITIONS,
        producers=producers,
        settled=settled,
        client_cpu_s=round(sum(r["client_cpu_s"] for r in results), 2),
        **cpu,
    )
    label = _size(size)
    rows = [Row(SECTION, system, f"RF=3 acks=all {label}", values)]
    say(f"{system} RF=3 acks=all {label}: {perf_test_line(values)}")
    if values["records"] <= 0:
        return rows
    meter = CpuMeter(pids)
    res = _in_process(settings, catch_up_worker, bootstrap, topic, parts, values["records"], 300.0)
    cpu = meter.values()
    cv = {
        "protocol": protocol,
        "kind": "catch-up",
        "record_bytes": size,
        "records": res["records"],
        "expected": values["records"],
        "seconds": res["seconds"],
        "records_per_s": res["records"] / res["seconds"],
        "mb_per_s": res["bytes"] / res["seconds"] / MB,
        "client_cpu_s": round(res["client_cpu_s"], 2),
        **cpu,
    }
    rows.append(Row(SECTION, system, f"catch-up RF=3 {label}", cv))
    say(
        f"{system} catch-up {label}: {cv['records']} records in {cv['seconds']:.1f} s, "
        f"{cv['records_per_s']:.0f} records/s, {cv['mb_per_s']:.1f} MB/s"
    )
    return rows


def _e2e(
    settings: Mapping[str, str],
    bootstrap: str,
    system: str,
    protocol: str,
    seconds: float,
    pids: Sequence[int],
    say: Say,
) -> Row:
    """``bench.e2e`` for one rate, with the cluster's client settings and its brokers' CPU."""
    rate = E2E_RATE
    topic = f"security-e2e-{rate}"
    create_topic(settings, bootstrap, topic)
    meter = CpuMeter(pids)
    values = measure_e2e(settings, bootstrap, topic, range(PARTITIONS), rate=rate, seconds=seconds)
    values.update(protocol=protocol, kind="e2e", **meter.values())
    say(e2e_line(system, rate, values))
    return Row(SECTION, system, f"e2e RF=3 acks=all {rate} rec/s", values)


def security_rows(
    launcher: Launcher,
    work: Path,
    sizes: Sequence[int],
    seconds: float,
    producers: int,
    e2e_seconds: float,
    say: Say,
    rows: list[Row],
    *,
    remove: bool = True,
) -> list[Row]:
    """Both clusters' rows, plaintext first; appended to ``rows`` as each cluster is
    done, so the plaintext figures survive a SASL_SSL failure. Returns ``rows``."""
    for mode in MODES:
        say(f"security: {mode} cluster")
        directory = work / f"security-{mode}"
        rows.extend(
            cluster_rows(
                launcher,
                directory,
                mode,
                sizes,
                seconds,
                producers,
                e2e_seconds,
                say,
                remove=remove,
            )
        )
    return rows


# --- the comparison (pure: the report and the tests use it) ---------------------------


def comparisons(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each workload measured on both protocols, in the order the plaintext rows came:
    ``{"workload", "kind", "plaintext", "sasl_ssl", "ratio"}`` with the two rows' values
    and the SASL_SSL ÷ plaintext ratio of records/s (throughput rows: MB/s has the same
    ratio, the records being the same size) or of the p99 latency (e2e rows; also
    ``p50_ratio``). A ratio is None when the plaintext figure is 0."""
    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    order: list[str] = []
    for r in rows:
        if r["section"] != SECTION:
            continue
        v = r["values"]
        if v.get("kind") == "connection":
            continue
        workload = r["workload"]
        if workload not in by:
            by[workload] = {}
            order.append(workload)
        by[workload][v["protocol"]] = v
    out: list[dict[str, Any]] = []
    for workload in order:
        plain, secured = by[workload].get(PLAINTEXT), by[workload].get(SASL_SSL)
        if plain is None or secured is None:
            continue
        kind = plain["kind"]
        entry: dict[str, Any] = {
            "workload": workload,
            "kind": kind,
            "plaintext": plain,
            "sasl_ssl": secured,
        }
        if kind == "e2e":
            entry["ratio"] = _ratio(secured["latency_ms"]["p99"], plain["latency_ms"]["p99"])
            entry["p50_ratio"] = _ratio(secured["latency_ms"]["p50"], plain["latency_ms"]["p50"])
        else:
            entry["ratio"] = _ratio(secured["records_per_s"], plain["records_per_s"])
        out.append(entry)
    return out


def connections(rows: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The ``connection`` row of each protocol measured: protocol → values."""
    return {
        r["values"]["protocol"]: r["values"]
        for r in rows
        if r["section"] == SECTION and r["values"].get("kind") == "connection"
    }


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _size(size: int) -> str:
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} B"
