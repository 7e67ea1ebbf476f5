"""Client quota entities, their config keys and Kafka's precedence (KIP-13, KIP-55, KIP-546).

Theory of operation:

1. An entity is a user, a client-id, or a (user, client-id) pair; either name may be the
   default (``<default>``, Kafka's ``ZooKeeperInternals.DEFAULT_STRING``). Names are kept
   as ZooKeeper holds them: sanitized (Kafka's ``Sanitizer``: a real name never contains
   ``<``, so the default cannot collide with one). ``QuotaEntity.from_wire`` /
   ``to_wire`` convert at the protocol's edge (a null name on the wire is the default).
2. The keys are Kafka's ``QuotaConfigs``: ``producer_byte_rate`` and
   ``consumer_byte_rate`` (LONG, bytes a second), ``request_percentage`` (DOUBLE, percent
   of one request handler) and ``controller_mutation_rate`` (DOUBLE, KIP-599; stored and
   described, not enforced). Alterations are checked as ``ZkAdminManager.alterClientQuotas``
   does (``check_op``): an unknown key is INVALID_REQUEST "Invalid configuration key <k>";
   a LONG key given a fraction INVALID_REQUEST "Configuration <k> must be a LONG value".
3. Precedence (KIP-55): for one key, a request of (user U, client-id C) takes the quota of
   the first of these entities that sets that key, each key on its own::

       1. /config/users/U/clients/C           5. /config/users/<default>/clients/<default>
       2. /config/users/U/clients/<default>   6. /config/users/<default>
       3. /config/users/U                     7. /config/clients/C
       4. /config/users/<default>/clients/C   8. /config/clients/<default>

   The matched level also names the sensor the request counts towards (Kafka's
   ``DefaultQuotaCallback.quotaMetricTags``): a user-level quota (3, 6) is shared by all
   of the user's clients (tags ``(U, "")``), a client-level one (7, 8) by all users of the
   client-id (tags ``("", C)``), the others are per (U, C). Nothing matched: no quota.

Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.zk.users import desanitize, sanitize

#: The default entity name, in ZooKeeper and here (rule 1).
DEFAULT: Final = "<default>"
#: Entity types on the wire (Kafka's ``ClientQuotaEntity``).
USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
#: Rule 2: each key and whether it is Kafka's LONG (else DOUBLE).
QUOTA_KEYS: Final[Mapping[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

Outcome = tuple[ErrorCode, str | None]
OK: Final[Outcome] = (ErrorCode.NONE, None)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Rule 1: sanitized names or ``DEFAULT``; None: the entity has no such component."""

    user: str | None = None
    client_id: str | None = None

    @staticmethod
    def from_wire(components: Mapping[str, str | None]) -> QuotaEntity:
        """From the protocol's ``{entity type: name or None (the default)}``."""

        def name(key: str) -> str | None:
            if key not in components:
                return None
            value = components[key]
            return DEFAULT if value is None else sanitize(value)

        return QuotaEntity(name(USER), name(CLIENT_ID))

    def to_wire(self) -> list[tuple[str, str | None]]:
        """The protocol's ``(entity type, name or None)`` list, user first."""
        out: list[tuple[str, str | None]] = []
        for kind, value in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if value is not None:
                out.append((kind, None if value == DEFAULT else desanitize(value)))
        return out

    def describe(self) -> str:
        """Kafka's ``ClientQuotaEntity`` text, for messages and the CLI."""
        parts = []
        for kind, value in self.to_wire():
            parts.append(f"{kind}={'<default>' if value is None else value}")
        return ", ".join(parts)


def check_op(key: str, value: float | None) -> tuple[str | None, Outcome]:
    """Rule 2 for one op: the text to store (None: remove the key) and the outcome."""
    is_long = QUOTA_KEYS.get(key)
    if is_long is None:
        return None, (ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value is None:
        return None, OK
    if is_long:
        epsilon = 1e-6
        whole = int(value + epsilon)
        if abs(whole - value) > epsilon:
            return None, (ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a LONG value")
        return str(whole), OK
    return repr(float(value)), OK


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's znode config as numbers (other keys, such as SCRAM
    credentials, and values that are no number are left out)."""
    out: dict[str, float] = {}
    for key in QUOTA_KEYS:
        text = config.get(key)
        if text is None:
            continue
        try:
            out[key] = float(text)
        except ValueError:
            continue
    return out


#: Sensor tags: (sanitized user or "", client-id or "") (rule 3).
Tags = tuple[str, str]


def precedence(user: str, client_id: str, raw_client_id: str) -> list[tuple[QuotaEntity, Tags]]:
    """Rule 3's eight levels for sanitized ``user`` and ``client_id``, with the tags of
    the sensor a match at each level counts towards (``raw_client_id`` in the tags)."""
    d = DEFAULT
    per_pair = (user, raw_client_id)
    return [
        (QuotaEntity(user, client_id), per_pair),
        (QuotaEntity(user, d), per_pair),
        (QuotaEntity(user, None), (user, "")),
        (QuotaEntity(d, client_id), per_pair),
        (QuotaEntity(d, d), per_pair),
        (QuotaEntity(d, None), (user, "")),
        (QuotaEntity(None, client_id), ("", raw_client_id)),
        (QuotaEntity(None, d), ("", raw_client_id)),
    ]


def find_quota(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    key: str,
    user: str,
    client_id: str,
    raw_client_id: str,
) -> tuple[float, Tags] | None:
    """Rule 3: the bound for ``key`` and its sensor's tags, or None (no quota)."""
    for entity, tags in precedence(user, client_id, raw_client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return values[key], tags
    return None


__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "IP",
    "OK",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "Outcome",
    "QuotaEntity",
    "Tags",
    "check_op",
    "desanitize",
    "find_quota",
    "precedence",
    "quota_values",
    "sanitize",
]
