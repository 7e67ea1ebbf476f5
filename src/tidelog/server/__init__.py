"""The broker: an asyncio shell around the pure protocol and replication layers and storage.

Subpackages, top to bottom (each imports only those below it: the import-linter contract
"The broker shell's layers" in pyproject.toml):

    broker.py      composition root (``Broker``): wiring, start-up, periodic checkpoints /
                   retention / flush, shutdown; ``process.py``: process-wide memory tuning
    apis           the handler groups of Kafka's APIs (``KafkaApis``), the handler table and
                   the ``Dispatcher`` (decode -> handler -> encode)
    coordinators   the group and transaction coordinators, FindCoordinator, markers
    observability  Prometheus metrics with Kafka's JMX names, the web console, log format
    cluster        the broker in a ZooKeeper cluster (``ClusterNode``) and its metadata
                   backend (``ZkBackend``)
    metadata       the topic image, the ``MetadataBackend`` interface and the lone broker's
                   backend (``tidelog-metadata.json``)
    replica        hosted partitions (storage ``Log`` + replication ``Partition``), the
                   produce and fetch paths, purgatory, replication quotas, log dir moves
    auth           the ACL authorizer, the handlers' checks, the broker's security
    network        one ``Connection`` per client (framing, ordered pipelining,
                   back-pressure), listeners, SASL, the current request's context
    config         broker and topic configuration with Kafka's names, defaults, validation

Failures: a peer's bad bytes end as an ``ErrorCode`` in the response or as
``network.connection.CloseConnection`` (that connection only); a bad setting is a
``ConfigError`` at start-up naming the key; anything else raised by a handler is a bug,
logged with its traceback, and closes that one connection.
"""
