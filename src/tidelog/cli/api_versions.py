"""``tidelog broker-api-versions``: what each broker advertises in ApiVersions, printed as
Kafka's kafka-broker-api-versions.sh prints it (``NodeApiVersions.toString``)::

    127.0.0.1:9092 (id: 0 rack: null) -> (
        Produce(0): 0 to 12 [usable: 12],
        ...
        DescribeQuorum(55): UNSUPPORTED,
        ...
    )

One block per broker of the cluster's Metadata, in id order; one line per API key tidelog
knows (Kafka's names), in key order. ``usable`` is the highest version in the broker's range
that tidelog's own codec can write (kio's schemas; keys 4-7 tidelog's own, version 0):
``[unusable: node too new]`` when the broker's range starts above them, ``node too old``
when it ends below them. A broker that cannot be reached prints the error in its block and
makes the exit status 1.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping

from kio.index import KioIndexError, load_request_schema

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import add_bootstrap_flags, resolve_bootstrap, resolve_security
from tidelog.client import BlockingClient
from tidelog.client.errors import ClientConnectionError, ClientTimeoutError
from tidelog.protocol.apis import CONTROL_APIS, ApiKey

#: kio's newest schemas stay well below this.
_MAX_VERSION_PROBED = 64


def api_name(key: ApiKey) -> str:
    """Kafka's name of ``key``: OFFSET_FOR_LEADER_EPOCH -> OffsetForLeaderEpoch."""
    return "".join(part.capitalize() for part in key.name.split("_"))


@functools.cache
def client_versions(key: ApiKey) -> frozenset[int]:
    """The versions of ``key`` tidelog's codec can write."""
    if key in CONTROL_APIS:
        return frozenset({0})
    versions = set()
    for version in range(_MAX_VERSION_PROBED):
        try:
            load_request_schema(int(key), version)
        except KioIndexError:
            continue
        versions.add(version)
    return frozenset(versions)


def api_line(key: ApiKey, advertised: tuple[int, int] | None) -> str:
    """One API's line (without the separator)."""
    name = f"{api_name(key)}({int(key)})"
    if advertised is None:
        return f"{name}: UNSUPPORTED"
    low, high = advertised
    ours = client_versions(key)
    usable = [v for v in ours if low <= v <= high]
    if usable:
        note = f"usable: {max(usable)}"
    elif ours and low > max(ours):
        note = "unusable: node too new"
    else:
        note = "unusable: node too old"
    return f"{name}: {low} to {high} [{note}]"


def node_block(header: str, versions: Mapping[int, tuple[int, int]]) -> str:
    """One broker's block, as Kafka prints it."""
    lines = [api_line(key, versions.get(int(key))) for key in ApiKey]
    body = ",\n".join(f"\t{line}" for line in lines)
    return f"{header} -> (\n{body}\n)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)


def run(args: argparse.Namespace) -> int:
    status = 0
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        brokers = client.metadata([]).brokers
        for node_id in sorted(brokers):
            broker = brokers[node_id]
            rack = broker.rack if broker.rack is not None else "null"
            header = f"{broker.host}:{broker.port} (id: {node_id} rack: {rack})"
            try:
                versions = client.api_versions(node_id)
            except (ClientConnectionError, ClientTimeoutError) as exc:
                print(f"{header} -> ERROR: {exc}")
                status = 1
                continue
            print(node_block(header, versions))
    return status


COMMANDS["broker-api-versions"] = (
    "print the API versions each broker supports (like kafka-broker-api-versions.sh)",
    add_arguments,
    run,
)
