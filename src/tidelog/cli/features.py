"""``tidelog features``: KIP-584 feature versions, like Kafka's kafka-features.sh.

- ``describe``: ApiVersions (v3+) of one broker: per supported feature, sorted by name,
  ``Feature: F<TAB>SupportedMinVersion: a<TAB>SupportedMaxVersion: b<TAB>
  FinalizedVersionLevel: c<TAB>Epoch: e`` (level 0 when not finalized; ``-`` for an
  unknown epoch), Kafka's line.
- ``upgrade``, ``downgrade [--unsafe]``, ``disable [--unsafe]`` with ``--feature F=LEVEL``
  (repeatable; ``disable`` takes names; ``--feature F --version V`` also works for one
  feature): one UpdateFeatures (v1, else v0) to the controller; ``--dry-run`` sends it with
  ``validate_only``. Per feature, sorted: ``F was upgraded to V.`` (dry run ``F can be
  upgraded to V.``) or ``Could not upgrade F to V. <the broker's message>`` (dry run ``Can
  not ...``); any failure: ``N out of M operation(s) failed.`` on stderr, exit 1. A
  top-level error (CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER) fails every feature with
  its message, as Kafka's Admin client does.

What tidelog supports and why every update is refused: docs/protocol.md "Features".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

#: UpdateFeatures' upgrade types (``UpdateFeaturesRequest.UpgradeType``).
UPGRADE: Final = 1
SAFE_DOWNGRADE: Final = 2
UNSAFE_DOWNGRADE: Final = 3


def _error_name(code: Any) -> str:
    known = ErrorCode._value2member_map_.get(int(code))
    return known.name if isinstance(known, ErrorCode) else f"error code {int(code)}"


def describe_lines(response: Any) -> list[str]:
    """kafka-features.sh describe's lines for an ApiVersions (v3+) response."""
    finalized = {str(f.name): int(f.max_version_level) for f in response.finalized_features}
    epoch = int(response.finalized_features_epoch)
    shown_epoch = str(epoch) if epoch >= 0 else "-"
    return [
        f"Feature: {f.name}\tSupportedMinVersion: {int(f.min_version)}\t"
        f"SupportedMaxVersion: {int(f.max_version)}\t"
        f"FinalizedVersionLevel: {finalized.get(str(f.name), 0)}\tEpoch: {shown_epoch}"
        for f in sorted(response.supported_features, key=lambda f: str(f.name))
    ]


def parse_updates(op: str, features: Sequence[str], version: int | None) -> dict[str, int]:
    """``--feature`` values as ``name -> level`` (``disable``: level 0)."""
    if not features:
        raise UsageError(f"You must specify at least one feature to {op}")
    updates: dict[str, int] = {}
    for item in features:
        name, sep, level = item.partition("=")
        if op == "disable":
            if sep:
                raise UsageError(f"--feature for disable takes a name, not {item!r}")
            updates[name] = 0
            continue
        if not sep:
            if version is None or len(features) != 1:
                raise UsageError(
                    f"--feature must be NAME=LEVEL (or one NAME with --version): {item!r}"
                )
            level = str(version)
        try:
            updates[name] = int(level)
        except ValueError:
            raise UsageError(f"the level of {name!r} is not a number: {level!r}") from None
    return updates


def update_report(
    op: str, updates: Mapping[str, int], errors: Mapping[str, str | None], dry_run: bool
) -> tuple[list[str], int]:
    """Kafka's per-feature lines for ``errors`` (None: done) and the number of failures."""
    lines = []
    failures = 0
    for name in sorted(updates):
        level = updates[name]
        message = errors.get(name)
        if message is not None:
            helper = "Can not" if dry_run else "Could not"
            what = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
            lines.append(f"{helper} {what}. {message}")
            failures += 1
        else:
            verb = "can be" if dry_run else "was"
            done = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{name} {verb} {done}")
    return lines, failures


def _describe(client: BlockingClient) -> int:
    low, high = client.api_versions().get(int(ApiKey.API_VERSIONS), (0, -1))
    version = min(high, 4)
    if version < 3 or version < low:
        raise CommandError("the broker does not describe features (ApiVersions below v3)")
    response = client.send(build(load_request_schema(ApiKey.API_VERSIONS, version), {}))
    for line in describe_lines(response):
        print(line)
    return 0


def _update(client: BlockingClient, args: argparse.Namespace) -> int:
    op = str(args.action)
    updates = parse_updates(op, args.feature or [], args.version)
    kind = UPGRADE
    if op != "upgrade":
        kind = UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    controller = client.metadata([]).controller_id
    node_id = controller if controller >= 0 else None
    low, high = client.api_versions(node_id).get(int(ApiKey.UPDATE_FEATURES), (0, -1))
    version = min(high, 1)
    if version < low:
        raise CommandError(
            "the controller does not support UpdateFeatures", code=ErrorCode.UNSUPPORTED_VERSION
        )
    if version == 0 and args.dry_run:
        raise CommandError("--dry-run needs UpdateFeatures v1", code=ErrorCode.UNSUPPORTED_VERSION)
    items = [
        {"feature": name, "max_version_level": level, "upgrade_type": kind,
         "allow_downgrade": kind != UPGRADE}
        for name, level in updates.items()
    ]  # fmt: skip
    request = build(
        load_request_schema(ApiKey.UPDATE_FEATURES, version),
        {"timeout": 60_000, "feature_updates": items, "validate_only": bool(args.dry_run)},
    )
    response = client.send(request, node_id=node_id)
    errors: dict[str, str | None] = {}
    if response.error_code != ErrorCode.NONE:
        message = response.error_message or _error_name(response.error_code)
        errors = dict.fromkeys(updates, message)
    else:
        answered = {str(r.feature): r for r in response.results}
        for name in updates:
            r = answered.get(name)
            if r is None:
                errors[name] = "The controller response did not contain a result for this feature."
            elif r.error_code != ErrorCode.NONE:
                errors[name] = r.error_message or _error_name(r.error_code)
    lines, failures = update_report(op, updates, errors, bool(args.dry_run))
    for line in lines:
        print(line)
    if failures:
        print(f"{failures} out of {len(updates)} operation(s) failed.", file=sys.stderr)
        return 1
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("describe", help="describe the supported and finalized features")
    add_bootstrap_flags(p)
    for op, text in (
        ("upgrade", "upgrade finalized features"),
        ("downgrade", "downgrade finalized features"),
        ("disable", "disable (delete) finalized features"),
    ):
        p = sub.add_parser(op, help=text, description=text)
        add_bootstrap_flags(p)
        p.add_argument(
            "--feature",
            action="append",
            metavar="NAME" if op == "disable" else "NAME=LEVEL",
            help="a feature to change (repeatable)",
        )
        if op != "disable":
            p.add_argument("--version", type=int, help="the level, for one --feature NAME")
        else:
            p.set_defaults(version=None)
        if op != "upgrade":
            p.add_argument("--unsafe", action="store_true", help="allow a lossy downgrade")
        else:
            p.set_defaults(unsafe=False)
        p.add_argument("--dry-run", action="store_true", help="validate only, change nothing")


def run(args: argparse.Namespace) -> int:
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        if args.action == "describe":
            return _describe(client)
        return _update(client, args)


COMMANDS["features"] = (
    "describe and update feature versions (KIP-584, like kafka-features.sh)",
    add_arguments,
    run,
)
