"""Render ``results.json`` as a markdown report, with the PNG charts of ``bench.plots``
(matplotlib, Agg backend) beside it and linked under each section's table."""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tidelog.bench import plots
from tidelog.bench.common import CLIENT_BOUND_CPU, client_bound


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _f(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _load_s(row: dict[str, Any]) -> str:
    return " ".join(f"{x:.2f}" for x in row["load_average"])


def render_markdown(data: dict[str, Any], charts: Sequence[plots.Chart] = ()) -> str:
    """The report: a header, the targets, one table per section with its figures after it,
    then what was not measured and the rows' notes."""
    rows = data["rows"]

    def section(name: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["section"] == name]

    out = _header(data)
    out += _targets_table(rows)
    out += _limits_table(section("limits"))
    out += _produce_table(section("produce"))
    out += _figures(charts, "produce")
    out += _compression_table(section("compression"))
    out += _figures(charts, "compression")
    out += _cleaner_table(section("cleaner"))
    out += _catch_up_table(section("catch-up"))
    out += _figures(charts, "catch-up")
    out += _e2e_table(section("e2e"))
    out += _figures(charts, "e2e")
    if txn := section("transactions"):
        out += _transactions(txn)
    out += _figures(charts, "transactions")
    if sec := section("security"):
        out += security_section(sec)
    out += _figures(charts, "security")
    out += _failover_table(section("failover"))
    out += _figures(charts, "failover")
    out += _scale_table(section("scale"))
    if (met := section("metrics")) or section("metrics scrape"):
        from tidelog.bench import metrics

        out += metrics.markdown(met, section("metrics scrape"))
    out += _figures(charts, "metrics")
    if zone := section("zones"):
        from tidelog.bench import zones

        out += zones.markdown(zone)
    if sp := section("spark"):
        from tidelog.bench import spark

        out += spark.markdown(sp)
    # Figures of a section this report has no table for (yet): linked all the same.
    if rest := [c for c in charts if c.section not in _SECTIONS_WITH_FIGURES]:
        out += ["## More figures", "", *(x for c in rest for x in (f"![{c.title}]({c.file})", ""))]
    out += _not_measured(data["skipped"])
    out += _notes(rows)
    return "\n".join(out)


def _header(data: dict[str, Any]) -> list[str]:
    """The command, the machine and its load at the start and the end."""
    m = data["machine"]
    return [
        "# tidelog bench results",
        "",
        f"Command: `{data['command']}` — started {m['started_utc']}, took "
        f"{data['elapsed_s']:.0f} s.",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_bytes'] / 2**30:.1f} GiB RAM, "
        f"Linux {m['kernel']}, Python {m['python']}. Load average (1/5/15 min) at start "
        f"{' '.join(f'{x:.2f}' for x in data['load_at_start'])}, at end "
        f"{' '.join(f'{x:.2f}' for x in data['load_at_end'])}; every row carries the load "
        "when it finished.",
        "",
        f"Code: {_code(m)}.",
        "",
        *_external_cluster(data.get("external_cluster")),
    ]


def _external_cluster(cluster: dict[str, Any] | None) -> list[str]:
    """What ``--bootstrap-server`` measured (``tidelog.bench.external``): the rows of system
    ``external`` ran there, with load generators on this machine."""
    if not cluster:
        return []
    return [
        f"Cluster measured (system `external`, nothing started by the bench): "
        f"`{cluster['bootstrap_servers']}`, cluster id `{cluster['cluster_id']}`, "
        f"{cluster['brokers']} broker(s) in Metadata, replication factor "
        f"{cluster['replication_factor']} (acks=1 rows: 1), {cluster['partitions']} "
        f"partitions per topic, {cluster['security_protocol']}; the load generators ran on "
        "the machine above.",
        "",
    ]


def _code(m: dict[str, Any]) -> str:
    """The commit measured, as the machine section records it (older runs have none)."""
    commit = m.get("commit")
    if not commit:
        return "commit not recorded"
    changes = " with uncommitted changes" if m.get("uncommitted_changes") else ""
    client = f", librdkafka {m['librdkafka']}" if m.get("librdkafka") else ""
    return f"tidelog `{commit[:10]}`{changes}{client}"


def _targets_table(rows: list[dict[str, Any]]) -> list[str]:
    """Each target of issue 8 this run has figures for, met or not."""
    targets = _targets(rows)
    if not targets:
        return []
    out = [
        "## Targets (issue 8)",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    out += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets]
    out.append("")
    return out


def _limits_table(lim: list[dict[str, Any]]) -> list[str]:
    """The machine's limits: what a plain loop and loopback sendfile reach."""
    if not lim:
        return []
    out: list[str] = []
    out += ["## Machine limits", "", "| measurement | figure | load |", "|---|---|---|"]
    for r in lim:
        v = r["values"]
        fig = (
            f"{v['payload_mb_s']:,.0f} MB/s of payload ({v['disk_mb_s']:,.0f} MB/s to disk)"
            if "payload_mb_s" in v
            else f"{v['mb_s']:,.0f} MB/s"
        )
        out.append(f"| {r['workload']} | {fig} | {_load_s(r)} |")
    out.append("")
    return out


def _produce_table(prod: list[dict[str, Any]]) -> list[str]:
    """Produce throughput and latency per system, each row's window and client CPU (a
    client-bound row marked), then the same-run ratios."""
    if not prod:
        return []
    out: list[str] = []
    out += [
        "## Produce throughput (enqueue → acknowledgement)",
        "",
        "| system | workload | records/s | MB/s | p50 ms | p99 ms | p99.9 ms | window | "
        "client CPU | load | note |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for r in prod:
        v = r["values"]
        lat = v.get("latency_ms", {})
        out.append(
            f"| {r['system']} | {r['workload']} | {_f(v['records_per_s'], 0)} | "
            f"{_f(v['mb_per_s'])} | {_f(lat.get('p50'))} | {_f(lat.get('p99'))} | "
            f"{_f(lat.get('p99.9'))} | {_window(v)} | {_client_cpu(v)} | {_load_s(r)} | "
            f"{r['note']} |"
        )
    out.append("")
    out += _produce_footnotes(prod)
    ratios = _ratios(prod)
    if ratios:
        out += ["Same-run ratios (tidelog RF=3 acks=all ÷ peer):", ""]
        out += [f"- {line}" for line in ratios]
        out.append("")
    return out


def _window(values: dict[str, Any]) -> str:
    """The in-flight window a row's publishers ran with: payload bytes and records."""
    w = values.get("window")
    if not w:
        return "—"
    return f"{w['bytes'] / 2**20:,.0f} MiB, {w['records']:,} records"


def _client_cpu(values: dict[str, Any]) -> str:
    """The busiest load generator's share of a core, and the mark of a client-bound row."""
    share = values.get("client_cpu")
    if share is None:
        return "—"
    return f"{share:.2f} (client-bound)" if client_bound(values) else f"{share:.2f}"


def _produce_footnotes(prod: list[dict[str, Any]]) -> list[str]:
    """What the latency, window and client CPU columns mean, and each row's timer."""
    out = [
        "Latency runs from the moment the client holds a record (the publisher had room in "
        "its window) to the acknowledgement the application sees; window: what a publisher "
        "may hold unacknowledged (payload bytes, records). Client CPU: the busiest "
        "load-generating process's user + system CPU seconds over its wall seconds, every "
        f"thread; at {CLIENT_BOUND_CPU} of a core or more a row is **client-bound**: its "
        "figures are capped by the load generator as much as by the system measured.",
        "",
    ]
    timers: dict[str, list[str]] = {}
    for r in prod:
        if timer := r["values"].get("timer"):
            timers.setdefault(timer, []).append(r["system"])
    if timers:
        out += ["Timers:", ""]
        out += [
            f"- {', '.join(dict.fromkeys(systems))}: {timer}" for timer, systems in timers.items()
        ]
        out.append("")
    return out


def _compression_table(comp: list[dict[str, Any]]) -> list[str]:
    """Compressed produce rows."""
    if not comp:
        return []
    out: list[str] = []
    out += [
        "## Compressed produce (RF=3 acks=all, text records)",
        "",
        "| workload | records/s | MB/s | p50 ms | p99 ms | p99.9 ms | stored B/record | load |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in comp:
        v = r["values"]
        lat = v.get("latency_ms", {})
        out.append(
            f"| {r['workload']} | {_f(v['records_per_s'], 0)} | {_f(v['mb_per_s'])} | "
            f"{_f(lat.get('p50'))} | {_f(lat.get('p99'))} | {_f(lat.get('p99.9'))} | "
            f"{_f(v.get('stored_bytes_per_record'), 0)} | {_load_s(r)} |"
        )
    out.append("")
    return out


def _cleaner_table(cl: list[dict[str, Any]]) -> list[str]:
    """The log cleaner's rows."""
    if not cl:
        return []
    out: list[str] = []
    out += [
        "## Log cleaner (storage API, one clean)",
        "",
        "| workload | MB before | MB after | clean s | MB/s cleaned | records/s | load |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in cl:
        v = r["values"]
        out.append(
            f"| {r['workload']} | {_f(v['bytes_before'] / 1e6)} | {_f(v['bytes_after'] / 1e6)} "
            f"| {_f(v['clean_s'])} | {_f(v['mb_per_s'])} | {_f(v['records_per_s'], 0)} "
            f"| {_load_s(r)} |"
        )
    out.append("")
    return out


def _catch_up_table(cu: list[dict[str, Any]]) -> list[str]:
    """Consumer catch-up over the produce backlog."""
    if not cu:
        return []
    out: list[str] = []
    out += [
        "## Consumer catch-up over the produce backlog",
        "",
        "| system | workload | records | records/s | MB/s | load |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in cu:
        v = r["values"]
        out.append(
            f"| {r['system']} | {r['workload']} | {_f(v['records'])} | "
            f"{_f(v['records_per_s'], 0)} | {_f(v['mb_per_s'])} | {_load_s(r)} |"
        )
    out.append("")
    return out


def _e2e_table(e2e: list[dict[str, Any]]) -> list[str]:
    """End-to-end latency rows (and what isolation their consumer ran with)."""
    if not e2e:
        return []
    out: list[str] = []
    out += [
        "## End-to-end latency produce → consume (acks=all)",
        "",
        "| system | workload | received/sent | p50 ms | p99 ms | p99.9 ms | max ms "
        "| broker CPU ms per 1,000 records | load |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in e2e:
        v = r["values"]
        lat = v["latency_ms"]
        out.append(
            f"| {r['system']} | {r['workload']} | {v['received']}/{v['sent']} | "
            f"{_f(lat['p50'])} | {_f(lat['p99'])} | {_f(lat['p99.9'])} | {_f(lat['max'])} | "
            f"{_f(v.get('broker_cpu_ms_per_1k'))} | {_load_s(r)} |"
        )
    out.append("")
    if any("read_committed" in r["workload"] for r in e2e):
        out += [
            "The acks=all rows' consumer runs with librdkafka's default isolation.level, "
            "read_committed, over non-transactional records: nothing is held back, as "
            "with read_uncommitted. The read_committed rows' records wait for their "
            "transaction's commit (see Notes).",
            "",
        ]
    return out


def _failover_table(fo: list[dict[str, Any]]) -> list[str]:
    """Failover rows, and the last not-ready answer of a failover never led."""
    if not fo:
        return []
    out: list[str] = []
    out += [
        "## Failover",
        "",
        "| event | victim led | every ISR full before | leaders elected s | "
        "produce to every partition s | process exit s | load |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for r in fo:
        v = r["values"]
        before = v.get("full_isr_before")
        full = "—" if before is None else ("yes" if before else "**no**")
        out.append(
            f"| {r['workload']} | {v['partitions_led_by_victim']} | {full} | "
            f"{_f(v['leaders_s'], 2)} | {_f(v['all_produced_s'], 2)} | "
            f"{_f(v['process_exit_s'], 2)} | {_load_s(r)} |"
        )
    for r in fo:
        if r["values"].get("last_not_ready") and r["values"]["leaders_s"] is None:
            out.append(
                f"\n{r['workload']}: never all led within 120 s; last seen: "
                f"`{r['values']['last_not_ready']}`"
            )
    out.append("")
    return out


def _scale_table(sc: list[dict[str, Any]]) -> list[str]:
    """Scale rows: topic creation, RSS and idle CPU."""
    if not sc:
        return []
    out: list[str] = []
    out += ["## Scale", "", "| measurement | figures | load |", "|---|---|---|"]
    for r in sc:
        v = r["values"]
        if "rss_mb" in v:
            fig = (
                "RSS MB per broker "
                + ", ".join(f"{k}: {x:.0f}" for k, x in v["rss_mb"].items())
                + "; idle CPU % "
                + ", ".join(f"{k}: {x:.1f}" for k, x in v["idle_cpu_percent"].items())
            )
        elif "all_led_full_isr_s" in v:
            fig = (
                f"CreateTopics answered {v['create_topics_answered_s']:.2f} s, every "
                f"partition led with full ISR {v['all_led_full_isr_s']:.2f} s"
            )
        else:
            fig = (
                f"CreateTopics answered {v['create_topics_answered_s']:.2f} s, every "
                f"partition led {v['all_led_s']:.2f} s"
            )
        out.append(f"| {r['workload']} | {fig} | {_load_s(r)} |")
    out.append("")
    return out


def _not_measured(skipped: list[dict[str, str]]) -> list[str]:
    if not skipped:
        return []
    out = ["## Not measured", ""]
    out += [f"- **{s['section']}**: {s['reason']}" for s in skipped]
    out.append("")
    return out


def _notes(rows: list[dict[str, Any]]) -> list[str]:
    """Each distinct note of a row outside the produce table (which shows its own)."""
    notes = [r for r in rows if r["note"] and r["section"] != "produce"]
    if not notes:
        return []
    out = ["## Notes", ""]
    seen: set[str] = set()
    for r in notes:
        key = f"{r['system']} {r['section']}: {r['note']}"
        if key not in seen:
            seen.add(key)
            out.append(f"- {key}")
    out.append("")
    return out


def _targets(rows: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for each target of issue 8 this run has figures for."""
    out: list[tuple[str, str, bool]] = []

    def find(section: str, system: str, workload: str) -> dict[str, Any] | None:
        for r in rows:
            if r["section"] == section and r["system"] == system and r["workload"] == workload:
                values: dict[str, Any] = r["values"]
                return values
        return None

    if v := find("produce", "tidelog", "RF=3 acks=all 100 B"):
        rate = v["records_per_s"]
        out.append(("acks=all RF=3 100 B ≥ 300,000 records/s", f"{rate:,.0f}", rate >= 300_000))
    if v := find("produce", "tidelog", "RF=3 acks=all 64 KiB"):
        mb = v["mb_per_s"]
        measured = f"{mb:,.1f} MB/s"
        # Each three-process row: written the kernel's way, and as the brokers write.
        ceilings = [
            (r["values"]["payload_mb_s"], "page cache kept" in r["workload"])
            for r in rows
            if r["section"] == "limits" and "three processes" in r["workload"]
        ]
        if ceilings:
            measured += (
                " ("
                + "; ".join(
                    f"{mb / ceiling:.0%} of this run's three-copy ceiling"
                    + (" written as the brokers write" if kept else "")
                    + f", {ceiling:,.0f}"
                    for ceiling, kept in ceilings
                )
                + ")"
            )
        out.append(("acks=all RF=3 64 KiB ≥ 200 MB/s", measured, mb >= 200))
    if v := find("e2e", "tidelog", "RF=3 acks=all 10000 rec/s"):
        p99 = v["latency_ms"]["p99"]
        out.append(("end-to-end p99 ≤ 20 ms at 10k records/s", f"{p99:,.1f} ms", p99 <= 20))
    for r in rows:
        if r["section"] != "failover":
            continue
        v = r["values"]
        done = v["all_produced_s"]
        if r["workload"].startswith("SIGKILL"):
            limit = v["zookeeper_session_timeout_s"] + 2
            label = f"failover of {r['workload'].split(', ')[1]} ≤ session timeout + 2 s"
        else:
            limit = 2.0
            label = "controlled shutdown ≤ 2 s"
        out.append(
            (
                label + f" ({limit:.0f} s)",
                f"leaders {_f(v['leaders_s'], 2)} s, every partition produced {_f(done, 2)} s",
                done is not None and done <= limit,
            )
        )
    out += _ahead_of_peers(rows)
    return out


def _ahead_of_peers(rows: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """tidelog's RF=3 acks=all rows against each peer's row of the same record size: the
    3-partition row, and the one-partition row (the peers' shape) where there is one."""
    out: list[tuple[str, str, bool]] = []
    tidelog = _tidelog_rf3(rows)
    for r in rows:
        if r["section"] != "produce" or r["system"] == "tidelog":
            continue
        size = r["values"]["record_bytes"]
        theirs = r["values"]["mb_per_s"]
        for partitions, mine in sorted(tidelog.get(size, {}).items(), reverse=True):
            shape = "" if partitions != 1 else ", one partition"
            out.append(
                (
                    f"ahead of {r['system']} at {size} B{shape}",
                    f"{mine:,.1f} vs {theirs:,.1f} MB/s ({mine / theirs:.2f}×)",
                    mine > theirs,
                )
            )
    return out


def _tidelog_rf3(rows: list[dict[str, Any]]) -> dict[int, dict[int, float]]:
    """MB/s of tidelog's RF=3 acks=all produce rows by record size, then partitions (3 when
    a results file does not record them)."""
    by: dict[int, dict[int, float]] = {}
    for r in rows:
        if (
            r["section"] == "produce"
            and r["system"] == "tidelog"
            and r["workload"].startswith("RF=3")
        ):
            v = r["values"]
            by.setdefault(v["record_bytes"], {})[v.get("partitions", 3)] = v["mb_per_s"]
    return by


def _transactions(rows: list[dict[str, Any]]) -> list[str]:
    """The transactional and idempotent producer rows, and their same-run ratio."""
    out = [
        "## Transactional produce (acks=all, RF=3, min.insync.replicas=2)",
        "",
        "| system | workload | records/s | MB/s | transactions/s | commit p50 ms | "
        "commit p99 ms | commit max ms | delivery p50 ms | delivery p99 ms | errors | load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        v = r["values"]
        commit = v.get("commit_latency_ms") or {}
        lat = v.get("latency_ms", {})
        out.append(
            f"| {r['system']} | {r['workload']} | {_f(v['records_per_s'], 0)} | "
            f"{_f(v['mb_per_s'])} | {_f(v['transactions_per_s']) if commit else '—'} | "
            f"{_f(commit.get('p50'))} | {_f(commit.get('p99'))} | {_f(commit.get('max'))} | "
            f"{_f(lat.get('p50'))} | {_f(lat.get('p99'))} | {_f(v['errors'])} | "
            f"{_load_s(r)} |"
        )
    out.append("")
    if (ratio := transaction_cost(rows)) is not None:
        out += [f"Same-run ratio: {ratio}", ""]
    return out


def security_section(rows: list[dict[str, Any]]) -> list[str]:
    """The security rows: each workload on SASL_SSL beside plaintext, with the ratio, and
    what ran (``tidelog.bench.security``)."""
    from tidelog.bench import security

    out = [
        "## SASL_SSL beside plaintext (RF=3, acks=all, min.insync.replicas=2)",
        "",
        "Two 3-broker clusters, one after the other, the same but for security; same "
        "records, partitions, producers and seconds on each.",
        "",
    ]
    pairs = security.comparisons(rows)
    if flows := [p for p in pairs if p["kind"] != "e2e"]:
        out += [
            "| workload | PLAINTEXT records/s | PLAINTEXT MB/s | SASL_SSL records/s | "
            "SASL_SSL MB/s | SASL_SSL ÷ PLAINTEXT | unacked or unread (plain / SASL_SSL) |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for p in flows:
            a, b = p["plaintext"], p["sasl_ssl"]
            out.append(
                f"| {p['workload']} | {_f(a['records_per_s'], 0)} | {_f(a['mb_per_s'])} | "
                f"{_f(b['records_per_s'], 0)} | {_f(b['mb_per_s'])} | "
                f"{_ratio(p['ratio'])} | {_lost(a)} / {_lost(b)} |"
            )
        out.append("")
    if e2e := [p for p in pairs if p["kind"] == "e2e"]:
        out += [
            "| workload | PLAINTEXT p50 / p99 / p99.9 ms | SASL_SSL p50 / p99 / p99.9 ms | "
            "SASL_SSL ÷ PLAINTEXT p50, p99 | received of sent |",
            "|---|---|---|---|---|",
        ]
        for p in e2e:
            a, b = p["plaintext"], p["sasl_ssl"]
            out.append(
                f"| {p['workload']} | {_lat(a)} | {_lat(b)} | {_ratio(p['p50_ratio'])}, "
                f"{_ratio(p['ratio'])} | plain {_f(a['received'])} of {_f(a['sent'])}, "
                f"SASL_SSL {_f(b['received'])} of {_f(b['sent'])} |"
            )
        out.append("")
    if pairs:
        out += [
            "CPU over each row: the three brokers' CPU seconds, the client processes' (all "
            "their threads), and the shares of the machine's CPU time busy (including stolen "
            "by the hypervisor) and idle waiting for the disk (iowait):",
            "",
            "| workload | PLAINTEXT brokers s / clients s / busy % / iowait % | "
            "SASL_SSL brokers s / clients s / busy % / iowait % |",
            "|---|---|---|",
        ]
        out += [
            f"| {p['workload']} | {_cpu(p['plaintext'])} | {_cpu(p['sasl_ssl'])} |" for p in pairs
        ]
        out.append("")
    ran = security.connections(rows)
    if tls := ran.get(security.SASL_SSL):
        out.append(
            f"SASL_SSL negotiated {tls.get('tls_version') or '?'} "
            f"({tls.get('cipher') or '?'}; {tls.get('openssl') or 'OpenSSL ?'} client), "
            f"SASL {tls.get('sasl_mechanism') or '?'} login. {security.WHAT_RAN}"
        )
        out.append("")
    missing = sorted({r["workload"] for r in rows} - {p["workload"] for p in pairs})
    missing = [w for w in missing if w != "connection"]
    if missing:
        out += [f"Measured on one protocol only: {', '.join(missing)}.", ""]
    return out


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _lost(values: dict[str, Any]) -> str:
    """Produce: records sent but not acknowledged; catch-up: acknowledged but not read."""
    if "expected" in values:
        return _f(values["expected"] - values["records"])
    return _f(values["sent"] - values["records"])


def _cpu(values: dict[str, Any]) -> str:
    return (
        f"{_f(values.get('broker_cpu_s'))} / {_f(values.get('client_cpu_s'))} / "
        f"{_f(values.get('machine_busy_percent'), 0)} % / "
        f"{_f(values.get('iowait_percent'), 0)} %"
    )


def _lat(values: dict[str, Any]) -> str:
    lat = values["latency_ms"]
    return f"{_f(lat['p50'])} / {_f(lat['p99'])} / {_f(lat['p99.9'])}"


def transaction_cost(rows: list[dict[str, Any]]) -> str | None:
    """The transactional producer's records/s as a share of the idempotent one's, for
    each system with both rows (None when no system has both)."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["section"] == "transactions" and "mode" in r["values"]:
            by.setdefault(r["system"], {})[r["values"]["mode"]] = r["values"]
    parts = []
    for system, modes in by.items():
        txn, idem = modes.get("transactional"), modes.get("idempotent")
        if txn and idem and idem["records_per_s"] > 0:
            per_txn = txn.get("records_per_transaction")
            parts.append(
                f"{system} transactions of {_f(per_txn)} ÷ idempotent: "
                f"{txn['records_per_s'] / idem['records_per_s']:.2g}× records/s "
                f"({txn['records_per_s']:,.0f} vs {idem['records_per_s']:,.0f})"
            )
    return "; ".join(parts) or None


def _ratios(prod: list[dict[str, Any]]) -> list[str]:
    """tidelog RF=3 acks=all ÷ each peer at each record size: the 3-partition row, then the
    one-partition row (the peer's shape) when the run has it."""
    tidelog = _tidelog_rf3(prod)
    peers = sorted(
        (r["system"], r["values"]["record_bytes"], r["values"]["mb_per_s"])
        for r in prod
        if r["system"] != "tidelog"
    )
    lines = []
    for system, size, theirs in peers:
        if theirs <= 0:
            continue
        for partitions, mine in sorted(tidelog.get(size, {}).items(), reverse=True):
            shape = "" if partitions != 1 else " (one partition each)"
            lines.append(
                f"{size} B vs {system}{shape}: {mine / theirs:.2f}× "
                f"({mine:.1f} vs {theirs:.1f} MB/s)"
            )
    return lines


def write_markdown(source: Path, target: Path, charts: Sequence[plots.Chart] = ()) -> None:
    target.write_text(render_markdown(_load(source), charts) + "\n", encoding="utf-8")


def write_charts(source: Path, directory: Path) -> list[Path]:
    """The charts of ``bench.plots`` for a results file (``plots.PlotsUnavailableError`` without
    matplotlib)."""
    return [directory / c.file for c in plots.draw(_load(source), directory)]


def write_report(
    source: Path, directory: Path, *, charts: bool = True, say: Callable[[str], None] = print
) -> list[plots.Chart]:
    """``results.md`` in ``directory``, with the charts drawn first (when asked for and
    matplotlib is there; without it, a line says so and the report has no figures)."""
    data = _load(source)
    drawn = plots.try_draw(data, directory, say) if charts else []
    (directory / "results.md").write_text(render_markdown(data, drawn) + "\n", encoding="utf-8")
    return drawn


#: The sections ``render_markdown`` links figures under (with ``_figures``).
_SECTIONS_WITH_FIGURES = (
    "produce",
    "compression",
    "catch-up",
    "e2e",
    "transactions",
    "security",
    "failover",
    "metrics",
)


def _figures(charts: Sequence[plots.Chart], section: str) -> list[str]:
    """Markdown image links (relative: the charts sit beside the report) for a section."""
    mine = [c for c in charts if c.section == section]
    return [line for c in mine for line in (f"![{c.title}]({c.file})", "")]
