"""``tidelog console``: where to open the web console (docs/console.md).

Every broker with ``metrics.listener`` set serves the console on it, at ``/console``
(``tidelog.server.observability.console``); each shows the whole cluster. This command
finds the URLs:

1. ``--metrics-url URL`` (``http://host:port``, a path is ignored): checks that the console
   answers there (``GET /api/snapshot``, 10 s) and prints ``URL/console`` with what it saw
   (brokers, controller, partitions). Exit 1 when it does not answer.
2. Otherwise it asks the cluster (``--bootstrap-server``): Metadata for the live brokers
   and the controller, then DescribeConfigs of each broker's ``metrics.listener``. A
   listener bound to every interface (``0.0.0.0``, ``::`` or no host) is reached at the
   broker's advertised host. Printed per broker: its console URL; or, when the broker has
   no metrics listener, how to enable it; or, for port 0 (a free port picked at start),
   where the broker logs the port it took. Exit 0 when at least one URL was found, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client.config_admin import describe_configs

RESOURCE_BROKER: Final = 4
CHECK_TIMEOUT_S: Final = 10.0
ANY_HOST: Final = ("", "0.0.0.0", "::", "[::]")
HOW_TO_ENABLE: Final = (
    "set metrics.listener=http://0.0.0.0:9404 (any free port) in its server.properties and "
    "restart it; the console is then at http://<broker host>:9404/console"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    parser.add_argument(
        "--metrics-url",
        metavar="URL",
        help="a broker's metrics listener (http://host:port): check the console answers "
        "there and print its URL, without asking the cluster",
    )


def base_url(raw: str) -> str:
    """``http://host:port`` of ``raw`` (a path or query is dropped); ValueError if not."""
    parts = urllib.parse.urlsplit(raw.strip())
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{raw!r} is not an http://host:port URL")
    port = parts.port  # ValueError for a bad port
    return f"http://{parts.netloc}" if port is not None else f"http://{parts.hostname}"


def check(url: str) -> dict[str, Any]:
    """The console's snapshot at ``url`` (rule 1); CommandError when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/api/snapshot", timeout=CHECK_TIMEOUT_S) as answer:
            found = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise CommandError(
            f"{url} answered {exc.code} for /api/snapshot: not a tidelog console",
            hint="pass the broker's metrics.listener URL",
        ) from None
    except (OSError, ValueError) as exc:
        raise CommandError(
            f"no console at {url}: {exc}", hint="is metrics.listener set on that broker?"
        ) from None
    if not isinstance(found, dict) or "brokers" not in found:
        raise CommandError(f"{url}/api/snapshot is not a tidelog console snapshot")
    return found


def run(args: argparse.Namespace) -> int:
    if args.metrics_url:
        try:
            url = base_url(args.metrics_url)
        except ValueError as exc:
            raise CommandError(
                str(exc), hint="for example --metrics-url http://127.0.0.1:9404"
            ) from None
        snap = check(url)
        partitions = sum(len(t["partitions"]) for t in snap["topics"])
        alive = [b["id"] for b in snap["brokers"] if b["alive"]]
        print(f"{url}/console")
        print(
            f"broker {snap['broker']} serves it: {len(alive)} live brokers {alive}, "
            f"controller {snap['controller']['id']} (epoch {snap['controller']['epoch']}), "
            f"{partitions} partitions",
            file=sys.stderr,
        )
        return 0
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap, client_id="tidelog-console", security=resolve_security(args)
    ) as client:
        cluster = client.metadata([])
        brokers = dict(sorted(cluster.brokers.items()))
        configs = client.run(
            describe_configs(
                client.client, [(RESOURCE_BROKER, str(b)) for b in brokers], synonyms=False
            )
        )
    found = 0
    for (broker_id, broker), result in zip(brokers.items(), configs, strict=True):
        controller = " (controller)" if broker_id == cluster.controller_id else ""
        value = next((e.value for e in result.entries if e.name == "metrics.listener"), None)
        if not value:
            print(f"broker {broker_id}{controller}: no metrics listener: {HOW_TO_ENABLE}")
            continue
        parts = urllib.parse.urlsplit(value)
        if parts.port == 0:
            print(
                f"broker {broker_id}{controller}: metrics.listener {value} picks a free port "
                "at start; its log says which ('metrics served on http://...'); then "
                "`tidelog console --metrics-url http://HOST:PORT`"
            )
            continue
        host = parts.hostname or ""
        if host in ANY_HOST or host.strip("[]") in ANY_HOST:
            host = broker.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        print(f"broker {broker_id}{controller}: http://{host}:{parts.port}/console")
        found += 1
    if found == 0:
        print(
            "no broker serves the console yet; every broker with metrics.listener does",
            file=sys.stderr,
        )
        return 1
    return 0


COMMANDS["console"] = (
    "print the URL of the web console (live replicas, elections and their reasons)",
    add_arguments,
    run,
)
