"""A Spark query against a SASL_SSL cluster (issue 20): ``kafka.security.protocol=SASL_SSL``,
``kafka.sasl.mechanism=SCRAM-SHA-256``, ``kafka.sasl.jaas.config`` with Java's
ScramLoginModule, and the cluster's CA as a PEM truststore, exactly as with Spark's Kafka
connector. The query reads one topic and writes another as a SCRAM user whose ACLs allow
just that; every record arrives once. With a wrong password the query fails, saying the
login failed.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.security.conftest import Secured
from tests.integration.security.conftest import secured as secured  # noqa: PLC0414 - fixture

PySparkException = pytest.importorskip("pyspark.errors").PySparkException

pytestmark = [pytest.mark.spark, pytest.mark.integration]

RECORDS = 300
#: What the broker answers a failed SCRAM login (Kafka's words), which the query's error
#: must carry.
REFUSED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-256"
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def security_options(secured: Secured, user: str, password: str) -> dict[str, str]:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    return {
        "kafka.bootstrap.servers": secured.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": jaas,
        "kafka.ssl.truststore.location": str(secured.ca),
        "kafka.ssl.truststore.type": "PEM",
    }


@pytest.fixture(scope="module")
def spark_user(secured: Secured) -> tuple[str, str, str, str]:
    """(user, password, source topic, sink topic): the user may read the source and write
    the sink, nothing else."""
    user, password = unique("spark"), "spark-" + uuid.uuid4().hex
    secured.add_user(user, password, "SCRAM-SHA-256")
    source = secured.create_topic(unique("spark-in"), partitions=3)
    sink = secured.create_topic(unique("spark-out"), partitions=3)
    principal = f"User:{user}"
    secured.acls(
        "add", "--allow-principal", principal, "--operation", "Read",
        "--operation", "Describe", "--topic", source,
    )  # fmt: skip
    secured.acls(
        "add", "--allow-principal", principal, "--operation", "Write",
        "--operation", "Describe", "--topic", sink,
    )  # fmt: skip
    secured.produce_as_admin(source, [f"order-{i:05d}".encode() for i in range(RECORDS)])
    return user, password, source, sink


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_query_reads_and_writes_over_sasl_ssl(
    spark: Any, secured: Secured, spark_user: tuple[str, str, str, str]
) -> None:
    user, password, source, sink = spark_user
    options = security_options(secured, user, password)
    read = spark.read.format("tidelog").options(**options).option("subscribe", source).load()
    (
        read.selectExpr("key", "CONCAT(CAST(value AS STRING), '-seen') AS value")
        .write.format("tidelog")
        .options(**options)
        .option("topic", sink)
        .option("kafka.acks", "all")
        .mode("append")
        .save()
    )
    written = secured.read_values(sink)
    assert sorted(written) == sorted(f"order-{i:05d}-seen".encode() for i in range(RECORDS))
    # The user may not read what it wrote: its ACLs allow WRITE on the sink, not READ.
    with pytest.raises(Exception) as refused:  # noqa: PT011 - Py4J or PySpark, checked below
        spark.read.format("tidelog").options(**options).option("subscribe", sink).load().collect()
    assert "TOPIC_AUTHORIZATION_FAILED" in str(refused.value)


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_query_with_a_wrong_password_fails_naming_the_login(
    spark: Any, secured: Secured, spark_user: tuple[str, str, str, str]
) -> None:
    user, _, source, sink = spark_user
    ends = secured.end_offsets(sink)
    mark = secured.log_mark()
    options = security_options(secured, user, "not-the-password")
    with pytest.raises(Exception) as failed:  # noqa: PT011 - Py4J or PySpark, checked below
        spark.read.format("tidelog").options(**options).option("subscribe", source).load().collect()
    message = str(failed.value)
    assert REFUSED in message, message[-3000:]
    assert "not-the-password" not in message
    mark.wait_for(rf"SASL authentication failed on listener SASL_SSL: .*user '{user}'")
    with pytest.raises(Exception) as failed_write:  # noqa: PT011
        (
            spark.createDataFrame([("x",)], "value STRING")
            .write.format("tidelog")
            .options(**options)
            .option("topic", sink)
            .mode("append")
            .save()
        )
    message = str(failed_write.value)
    assert REFUSED in message, message[-3000:]
    assert secured.end_offsets(sink) == ends
