"""The Grafana dashboard in ``deploy/grafana/tidelog-dashboard.json`` matches what brokers
serve (issue 22): every metric name any panel (or template variable) queries is in the
scrapes of a real three-broker cluster that has seen produces and a consumer. A renamed or
removed metric fails here, not on an operator's empty panel."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from tests.harness import BrokerCluster
from tests.integration.cluster.helpers import create_topic, produce
from tests.integration.cluster.test_metrics import metrics_port, scrape

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "tidelog-dashboard.json"

#: PromQL words that look like names: aggregations, functions (followed by "(" anyway),
#: keywords and set operators.
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan"}
)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once label matchers,
    range/subquery brackets, strings, grouping clauses and function calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # [5m], [$__rate_interval]
    text = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text
    )  # grouping labels
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables outside brackets
    names = set()
    for m in _IDENT.finditer(text):
        rest = text[m.end() :].lstrip()
        if rest.startswith("("):
            continue  # a function or aggregation
        word = m.group()
        if word.lower() in _KEYWORDS or re.fullmatch(r"[0-9.e]+", word):
            continue
        names.add(word)
    return names


_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def label_matchers(expr: str) -> set[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of every label matcher on a named metric; the
    target label ``instance`` (Prometheus adds it) left out."""
    out = set()
    for metric, body in _SELECTOR.findall(expr):
        for label, op, value in _MATCHER.findall(body):
            if label != "instance":
                out.add((metric, label, op, value))
    return out


def _labels(sample: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', sample.partition("{")[2]))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def referenced(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Metric name -> titles of the panels (or variables) that query it."""
    out: dict[str, set[str]] = {}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                out.setdefault(name, set()).add(panel["title"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        m = re.fullmatch(r"label_values\((\w+)\s*,\s*\w+\)", str(query))
        if m:
            out.setdefault(m.group(1), set()).add(f"variable {variable['name']}")
    return out


def test_metric_names_are_extracted_from_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (request, le) (rate(kafka_x_bucket{instance=~"$broker",'
        ' request="Produce"}[$__rate_interval]))) / on(instance) group_left kafka_y > 0'
    )
    assert metric_names(expr) == {"kafka_x_bucket", "kafka_y"}
    assert metric_names("count(kafka_z == 3) and process_open_fds") == {
        "kafka_z",
        "process_open_fds",
    }


def test_label_matchers_are_extracted() -> None:
    expr = 'sum(rate(kafka_a_total{instance=~"$broker", topic!="", request="Produce"}[1m]))'
    assert label_matchers(expr) == {
        ("kafka_a_total", "topic", "!=", ""),
        ("kafka_a_total", "request", "=", "Produce"),
    }


def test_dashboard_is_grafana_json_on_a_templated_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["broker"]["type"] == "query"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
            # Per-broker panels follow the broker variable (the controller's own figures
            # are cluster-wide: only the active controller reports them).
            if "kafka_controller" not in target["expr"]:
                assert 'instance=~"$broker"' in target["expr"], (panel["title"], target)
            if "histogram_quantile" in target["expr"]:
                assert "_bucket{" in target["expr"]
                assert "le)" in target["expr"]


def test_every_metric_the_dashboard_queries_is_served(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    wanted = referenced(dashboard)
    assert len(wanted) >= 40, sorted(wanted)
    # Three brokers: the follower-side series (fetcher lag) exist only where a replica is
    # followed, the controller's only on the active controller.
    cluster = new_cluster(3, {"metrics.listener": "http://127.0.0.1:0"})
    ports = [metrics_port(b) for b in cluster.brokers]
    create_topic(cluster, "dashboard", partitions=3, rf=3)
    produce(cluster.bootstrap, "dashboard", [f"v{i}".encode() for i in range(300)])
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "dashboard",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["dashboard"])
        read = 0
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read += 1
            if read >= 10:
                break
        assert read >= 10
    finally:
        consumer.close()
    served = {sample.split("{", 1)[0] for port in ports for sample in scrape(port)}
    missing = {name: sorted(titles) for name, titles in wanted.items() if name not in served}
    assert not missing, f"queried by the dashboard, not served: {missing}"
    # Each label a selector matches on exists on that metric, with the value it asks for
    # (``topic=""``: the series without the label; ``!=""``: one with a value).
    samples = [sample for port in ports for sample in scrape(port)]
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            for metric, label, op, value in label_matchers(target["expr"]):
                values = {
                    _labels(x).get(label, "") for x in samples if x.split("{", 1)[0] == metric
                }
                if op == "=":
                    assert value in values, (panel["title"], metric, label, value, values)
                elif op == "!=":
                    assert values - {value}, (panel["title"], metric, label, op, value)
