"""The rows of ``tidelog bench --bootstrap-server``: produce, catch-up and end-to-end latency
measured on a Kafka-compatible cluster the user names (kafka-producer-perf-test's job), with
the load generators of the tidelog rows (:mod:`tidelog.bench.kafka`) and nothing started:
no ZooKeeper, no brokers, no peers.

Rules:

1. The cluster answers a Metadata request (``AdminClient.list_topics``) within
   ``PROBE_TIMEOUT_S`` before anything else; its cluster id, the brokers it reports and its
   controller go into ``results.json`` and every row. No answer: ``ExternalClusterError``,
   SASL_AUTHENTICATION_FAILED when librdkafka saw the login refused.
2. Every topic of the run is created up front, in one CreateTopics request, named
   ``<prefix><run id>-<row>`` (``topic_names``). A topic the cluster refuses
   (INVALID_REPLICATION_FACTOR when the factor exceeds its brokers,
   TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION, ...) stops the run with Kafka's error code
   before anything is measured. A topic is used once every partition has a leader and a
   full ISR. Topic configs are the cluster's defaults, ``min.insync.replicas`` included.
3. A topic is deleted as soon as its rows are done (the cluster gets the disk back), and
   any left when the run ends or fails. Only topics this run created are deleted: another
   topic, even one whose name starts with the prefix, is never touched.
4. The acks=all rows and the end-to-end rows use ``--replication-factor`` (default
   ``min(3, brokers)``); the acks=1 rows use RF=1, as the tidelog rows do. Each topic has
   ``--partitions`` partitions (default 3, the tidelog rows' shape).
5. Every producer, consumer and admin client gets the ``--command-config`` settings
   (``tidelog.bench.client_conf``); the workers get them in their own processes through
   ``client_settings.run_with_settings``, so the code measured is the tidelog rows' code.
6. Before each row, and before deleting topics, the cluster must answer a Metadata request
   within ``PROBE_TIMEOUT_S`` again (rule 1's probe). A cluster that stopped answering
   fails the row at once with rule 1's error (the section says it and the run goes on to
   the next), and its topics are left in place and named, rather than each row and each
   deletion waiting out its clients' own timeouts (minutes). A row already running when
   the cluster goes away ends by its own bounds (a producer waits at most 180 s for its
   queue, a catch-up consumer 300 s). A produce row whose records were not all
   acknowledged says how many were not, and librdkafka's first error.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.bench.client_settings import run_with_settings
from tidelog.bench.common import MB, Row, settle
from tidelog.bench.e2e import e2e_line, measure_e2e
from tidelog.bench.kafka import (
    catch_up_worker,
    perf_test_line,
    produce_worker,
    run_parallel,
    summarise_produce,
)
from tidelog.bench.tidelog_rows import not_ready, size_label
from tidelog.server.config.broker_config import topic_name_error

Say = Callable[[str], None]

#: The ``system`` of every row measured here.
SYSTEM: Final = "external"
DEFAULT_PREFIX: Final = "tidelog-bench-"
DEFAULT_PARTITIONS: Final = 3
#: Replication factor when none is given: the tidelog rows', or every broker of a smaller
#: cluster (rule 4).
MAX_DEFAULT_REPLICATION_FACTOR: Final = 3
#: Seconds the first Metadata request may take (rule 1).
PROBE_TIMEOUT_S: Final = 10.0
#: Seconds for CreateTopics/DeleteTopics, and for a new topic to be led with a full ISR.
TOPIC_TIMEOUT_S: Final = 60.0
#: Records/s of the end-to-end rows (the tidelog rows' rates); 100 B records.
E2E_RATES: Final = (1000, 10_000)
#: Kafka's error code for a topic a DeleteTopics did not find (already gone).
_UNKNOWN_TOPIC_OR_PARTITION: Final = 3
#: Kafka's error code for a refused SASL login.
SASL_AUTHENTICATION_FAILED: Final = 58


class ExternalClusterError(Exception):
    """The cluster cannot be measured: no answer (rule 1), or it refused a bench topic
    (rule 2). ``code`` is Kafka's error code when the cluster gave one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Target:
    """What the user named: where the cluster is and how the bench's topics look."""

    bootstrap: str
    #: librdkafka settings of ``--command-config`` (empty: PLAINTEXT).
    settings: Mapping[str, str]
    #: None: ``min(3, brokers)`` (rule 4).
    replication_factor: int | None = None
    partitions: int = DEFAULT_PARTITIONS
    topic_prefix: str = DEFAULT_PREFIX


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What the cluster's Metadata answer says about it (rule 1)."""

    bootstrap_servers: str
    cluster_id: str | None
    brokers: int
    controller_id: int

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "cluster_id": self.cluster_id,
            "brokers": self.brokers,
            "controller_id": self.controller_id,
        }


def default_replication_factor(brokers: int) -> int:
    """Rule 4: the tidelog rows' 3, or every broker of a smaller cluster."""
    return max(1, min(MAX_DEFAULT_REPLICATION_FACTOR, brokers))


def produce_key(acks: str, size: int) -> str:
    return f"produce-acks-{acks}-{size}"


def e2e_key(rate: int) -> str:
    return f"e2e-{rate}"


def topic_names(
    prefix: str, run_id: str, sizes: Sequence[int], rates: Sequence[int]
) -> dict[str, str]:
    """Row key -> topic name for a run's produce rows (acks=all and acks=1 per size) and
    end-to-end rows (rule 2); ValueError with Kafka's reason when a name is not legal."""
    keys = [produce_key(acks, size) for acks in ("all", "1") for size in sizes]
    keys += [e2e_key(rate) for rate in rates]
    names = {key: f"{prefix}{run_id}-{key}" for key in keys}
    for name in names.values():
        if problem := topic_name_error(name):
            raise ValueError(problem)
    return names


def new_run_id() -> str:
    """Eight hex digits, so two runs (or a topic the user made) never share a name."""
    return secrets.token_hex(4)


def _quiet_logger() -> logging.Logger:
    """librdkafka's own log lines (one per failed connection) would bury the one-line
    error of rule 1: the admin client logs here, and nothing prints it."""
    logger = logging.getLogger("tidelog.bench.external.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


class ClientErrors:
    """The errors librdkafka reported to a client's ``error_cb`` (served by ``poll``): the
    last text of each code, so a Metadata request that got no answer can say why."""

    def __init__(self) -> None:
        self.last: dict[int, str] = {}

    def __call__(self, err: Any) -> None:
        self.last[int(err.code())] = str(err.str())


def admin_client(target: Target, errors: ClientErrors | None = None) -> Any:
    """An AdminClient with the target's settings, its log silenced and its errors to
    ``errors``; ExternalClusterError when librdkafka refuses the settings (a file it cannot
    read, a value it does not know)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient(
            {**target.settings, "bootstrap.servers": target.bootstrap},
            logger=_quiet_logger(),
            error_cb=errors or ClientErrors(),
        )
    except (KafkaException, ValueError, TypeError) as exc:
        raise ExternalClusterError(f"the client settings were refused: {exc}") from None


#: librdkafka's local error codes that say why no broker answered.
_AUTHENTICATION: Final = -169
_NOT_WHY: Final = frozenset({-187, -195})  # _ALL_BROKERS_DOWN, _TRANSPORT: no more than "no"


def describe_cluster(
    admin: Any,
    bootstrap: str,
    timeout_s: float = PROBE_TIMEOUT_S,
    errors: ClientErrors | None = None,
) -> ClusterInfo:
    """Rule 1: the cluster's Metadata, or ExternalClusterError within ``timeout_s``: a
    refused login is Kafka's SASL_AUTHENTICATION_FAILED with the broker's reason; otherwise
    the last error librdkafka reported (a TLS failure, ...) follows "cannot reach"."""
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0)  # serves the error callbacks
        seen = errors.last if errors is not None else {}
        if login := seen.get(_AUTHENTICATION):
            raise ExternalClusterError(
                f"the cluster at {bootstrap} refused the login: {login}",
                code=SASL_AUTHENTICATION_FAILED,
            ) from None
        why = [text for code, text in seen.items() if code not in _NOT_WHY]
        raise ExternalClusterError(
            f"cannot reach the cluster at {bootstrap} within {timeout_s:.0f} s: {_reason(exc)}"
            + (f" (last error: {why[-1]})" if why else "")
        ) from None
    if not md.brokers:
        raise ExternalClusterError(f"the cluster at {bootstrap} reports no brokers")
    return ClusterInfo(bootstrap, md.cluster_id, len(md.brokers), md.controller_id)


def unacknowledged(values: Mapping[str, Any]) -> str:
    """Rule 6: a produce row's records that were sent and not acknowledged."""
    sent, errors = values["sent"], values["errors"]
    missing = sent - values["records"]
    first = values.get("first_errors") or []
    said = [f"{errors} delivery errors" + (f" (first: {first[0]})" if first else "")]
    if missing > errors:
        said.append(f"{missing - errors} still queued when the producer stopped waiting")
    return f"{missing} of {sent} records sent were not acknowledged: " + "; ".join(said)


def _reason(exc: Exception) -> str:
    """The KafkaError's own text (``str()`` of the exception repeats its fields)."""
    err: Any = exc.args[0] if exc.args else None
    return str(err.str()) if hasattr(err, "str") else str(exc)


def _code(exc: Exception) -> int | None:
    """Kafka's error code of a KafkaException; None for librdkafka's local (negative) ones."""
    err: Any = exc.args[0] if exc.args else None
    code = err.code() if hasattr(err, "code") else None
    return code if isinstance(code, int) and code > 0 else None


@dataclass(frozen=True, slots=True)
class BenchTopic:
    name: str
    replication_factor: int


class ExternalCluster:
    """The cluster being measured and the topics this run created on it (rules 2-3)."""

    def __init__(
        self,
        target: Target,
        admin: Any,
        info: ClusterInfo,
        replication_factor: int,
        topics: Mapping[str, BenchTopic],
    ) -> None:
        self.target = target
        self.admin = admin
        self.info = info
        #: The acks=all and end-to-end rows' factor (rule 4).
        self.replication_factor = replication_factor
        self.topics = dict(topics)
        #: Names this run created and has not deleted yet (rule 3: nothing else is deleted).
        self.created: list[str] = []

    def to_json(self) -> dict[str, Any]:
        """What ``results.json`` records of the cluster and the run's topics."""
        return {
            **self.info.to_json(),
            "replication_factor": self.replication_factor,
            "partitions": self.target.partitions,
            "topic_prefix": self.target.topic_prefix,
            "security_protocol": self.target.settings.get("security.protocol", "PLAINTEXT"),
        }

    # --- topics (rules 2 and 3) -----------------------------------------------------------

    def create_topics(self, say: Say) -> None:
        """Rule 2: every topic in one CreateTopics, then each led with a full ISR."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        partitions = self.target.partitions
        new = [NewTopic(t.name, partitions, t.replication_factor) for t in self.topics.values()]
        if not new:  # --only limits
            return
        futures = self.admin.create_topics(
            new, operation_timeout=TOPIC_TIMEOUT_S, request_timeout=TOPIC_TIMEOUT_S
        )
        refused: ExternalClusterError | None = None
        for name, future in futures.items():
            try:
                future.result(TOPIC_TIMEOUT_S + 5)
            except KafkaException as exc:
                refused = refused or ExternalClusterError(
                    f"topic {name}: {_reason(exc)}", code=_code(exc)
                )
                continue
            except TimeoutError:
                # It may exist all the same; the run id makes the name this run's own.
                refused = refused or ExternalClusterError(
                    f"topic {name}: CreateTopics not answered within {TOPIC_TIMEOUT_S:.0f} s"
                )
            self.created.append(name)
        if refused is not None:
            raise refused
        for topic in self.topics.values():
            self._wait_ready(topic)
        say(
            f"created {len(self.created)} topics on {self.info.bootstrap_servers} "
            f"({partitions} partitions, RF {self.replication_factor} for acks=all and e2e)"
        )

    def _wait_ready(self, topic: BenchTopic) -> None:
        deadline = time.monotonic() + TOPIC_TIMEOUT_S
        partitions = self.target.partitions
        rf = topic.replication_factor
        why = not_ready(self.admin, topic.name, partitions, rf, frozenset())
        while why is not None:
            if time.monotonic() > deadline:
                raise ExternalClusterError(
                    f"topic {topic.name}: not every partition led with {rf} in-sync "
                    f"replicas within {TOPIC_TIMEOUT_S:.0f} s ({why})"
                )
            time.sleep(0.2)
            why = not_ready(self.admin, topic.name, partitions, rf, frozenset())

    def delete(self, names: Sequence[str], say: Say) -> None:
        """Rule 3: delete those of ``names`` this run created; a failure is said, not
        raised (the run's figures stand)."""
        from confluent_kafka import KafkaException

        mine = [n for n in names if n in self.created]
        if not mine:
            return
        try:
            self._require_reachable()
        except ExternalClusterError as exc:
            say(f"could not delete topics {', '.join(mine)}: {exc}")
            return
        futures = self.admin.delete_topics(
            mine, operation_timeout=TOPIC_TIMEOUT_S, request_timeout=TOPIC_TIMEOUT_S
        )
        for name, future in futures.items():
            try:
                future.result(TOPIC_TIMEOUT_S + 5)
            except KafkaException as exc:
                if _code(exc) != _UNKNOWN_TOPIC_OR_PARTITION:
                    say(f"could not delete topic {name}: {_reason(exc)}")
                    continue
            except TimeoutError:
                say(f"could not delete topic {name}: no answer in {TOPIC_TIMEOUT_S:.0f} s")
                continue
            self.created.remove(name)

    def close(self, say: Say) -> None:
        """Rule 3: delete every topic this run created and has not deleted yet."""
        self.delete(list(self.created), say)

    # --- rows -----------------------------------------------------------------------------

    def produce_rows(
        self, sizes: Sequence[int], seconds: float, producers: int, say: Say
    ) -> list[Row]:
        """Per size, an acks=all row (with the catch-up row over its backlog) and an acks=1
        row at RF=1, as ``tidelog_rows.produce_rows``; each topic deleted after its rows."""
        rows: list[Row] = []
        for acks in ("all", "1"):
            for size in sizes:
                topic = self.topics[produce_key(acks, size)]
                try:
                    rows += self._produce(topic, acks, size, seconds, producers, say)
                finally:
                    self.delete([topic.name], say)
        return rows

    def _require_reachable(self) -> None:
        """Rule 6: ExternalClusterError unless the cluster answers Metadata now."""
        describe_cluster(self.admin, self.target.bootstrap)

    def _produce(
        self, topic: BenchTopic, acks: str, size: int, seconds: float, producers: int, say: Say
    ) -> list[Row]:
        self._require_reachable()
        settings = dict(self.target.settings)
        bootstrap = self.target.bootstrap
        parts = list(range(self.target.partitions))
        args = [
            (settings, produce_worker, bootstrap, topic.name, size, seconds, acks, parts)
            for _ in range(producers)
        ]
        settled = settle()
        results = run_parallel(run_with_settings, args)
        values = summarise_produce(results, size)
        values.update(
            record_bytes=size,
            partitions=len(parts),
            producers=producers,
            replication_factor=topic.replication_factor,
            acks=acks,
            settled=settled,
            client_cpu_s=round(sum(r["client_cpu_s"] for r in results), 2),
            cluster=self.info.to_json(),
        )
        workload = f"RF={topic.replication_factor} acks={acks} {size_label(size)}"
        rows = [Row("produce", SYSTEM, workload, values, note=self._note())]
        say(f"{SYSTEM} {workload}: {perf_test_line(values)}")
        if values["sent"] > values["records"]:
            say(f"{SYSTEM} {workload}: {unacknowledged(values)}")
        if acks == "all" and values["records"] > 0:
            rows.append(self._catch_up(topic, size, values["records"], say))
        return rows

    def _catch_up(self, topic: BenchTopic, size: int, expected: int, say: Say) -> Row:
        self._require_reachable()
        parts = list(range(self.target.partitions))
        (res,) = run_parallel(
            run_with_settings,
            [
                (
                    dict(self.target.settings),
                    catch_up_worker,
                    self.target.bootstrap,
                    topic.name,
                    parts,
                    expected,
                    300.0,
                )
            ],
        )
        seconds = res["seconds"] or 1e-9
        cv = {
            "records": res["records"],
            "expected": expected,
            "seconds": res["seconds"],
            "records_per_s": res["records"] / seconds,
            "mb_per_s": res["bytes"] / seconds / MB,
            "record_bytes": size,
            "client_cpu_s": round(res["client_cpu_s"], 2),
            "cluster": self.info.to_json(),
        }
        workload = f"RF={topic.replication_factor} backlog {size_label(size)}"
        say(
            f"{SYSTEM} catch-up {size_label(size)}: {cv['records']} records in "
            f"{cv['seconds']:.1f} s, {cv['records_per_s']:.0f} records/s, "
            f"{cv['mb_per_s']:.1f} MB/s"
        )
        return Row("catch-up", SYSTEM, workload, cv, note=self._note())

    def e2e_rows(self, rates: Sequence[int], seconds: float, say: Say) -> list[Row]:
        """acks=all at fixed rates, latency from send to a consumer's hands, as
        ``tidelog_rows.e2e_rows``; each topic deleted after its row."""
        rows: list[Row] = []
        for rate in rates:
            topic = self.topics[e2e_key(rate)]
            try:
                rows.append(self._e2e(topic, rate, seconds, say))
            finally:
                self.delete([topic.name], say)
        return rows

    def _e2e(self, topic: BenchTopic, rate: int, seconds: float, say: Say) -> Row:
        self._require_reachable()
        parts = range(self.target.partitions)
        values = measure_e2e(
            self.target.settings,
            self.target.bootstrap,
            topic.name,
            parts,
            rate=rate,
            seconds=seconds,
        )
        values.update(
            replication_factor=topic.replication_factor,
            partitions=len(parts),
            cluster=self.info.to_json(),
        )
        say(e2e_line(SYSTEM, rate, values))
        workload = f"RF={topic.replication_factor} acks=all {rate} rec/s"
        note = f"{self._note()}; 100 B records, first second dropped as warm-up"
        return Row("e2e", SYSTEM, workload, values, note=note)

    def _note(self) -> str:
        return (
            f"{self.target.partitions} partitions; the cluster's topic defaults "
            "(min.insync.replicas included)"
        )


def plan(
    target: Target, rf: int, run_id: str, sizes: Sequence[int], rates: Sequence[int]
) -> dict[str, BenchTopic]:
    """Rules 2 and 4: each row's topic, at ``rf`` but for the acks=1 rows' RF=1."""
    names = topic_names(target.topic_prefix, run_id, sizes, rates)
    factors = {
        **{produce_key("all", size): rf for size in sizes},
        **{produce_key("1", size): 1 for size in sizes},
        **{e2e_key(rate): rf for rate in rates},
    }
    return {key: BenchTopic(name, factors[key]) for key, name in names.items()}


@contextlib.contextmanager
def prepared(
    target: Target, sizes: Sequence[int], rates: Sequence[int], say: Say
) -> Iterator[ExternalCluster]:
    """Rules 1-3: the cluster described and every topic of the run created; on leaving,
    whatever this run created and did not delete yet is deleted."""
    errors = ClientErrors()
    admin = admin_client(target, errors)
    info = describe_cluster(admin, target.bootstrap, errors=errors)
    say(
        f"cluster {info.cluster_id} at {info.bootstrap_servers}: {info.brokers} broker(s), "
        f"controller {info.controller_id}"
    )
    rf = target.replication_factor or default_replication_factor(info.brokers)
    topics = plan(target, rf, new_run_id(), sizes, rates)
    cluster = ExternalCluster(target, admin, info, rf, topics)
    try:
        cluster.create_topics(say)
        yield cluster
    finally:
        cluster.close(say)
