"""The broker: an asyncio shell around the pure protocol and replication layers and storage.

Modules, from the socket inwards:

    network          one ``Connection`` per client: framing (``FrameAssembler`` over the
                     protocol's ``FrameDecoder``), ordered pipelining, back-pressure, sendfile
    broker           composition root (``Broker``), ``Dispatcher`` (decode -> handler ->
                     encode), start-up, periodic checkpoints / retention / flush, shutdown
    apis             ``KafkaApis``: one handler per Kafka API
    replica_manager  hosted partitions (storage ``Log`` + replication ``Partition``), the
                     produce and fetch paths, ``DelayedProduce`` / ``DelayedFetch``
    purgatory        delayed operations keyed by partition, woken by appends, with timeouts
    metadata         the single-broker topic image (``tidelog-metadata.json``)
    config           broker / topic configuration with Kafka's names, defaults, validation
    metrics          Prometheus metrics with Kafka's JMX names, served on ``metrics.listener``
    messages         version-independent construction of kio response entities

Failures: a peer's bad bytes end as an ``ErrorCode`` in the response or as
``network.CloseConnection`` (that connection only); a bad setting is a ``ConfigError`` at
start-up naming the key; anything else raised by a handler is a bug, logged with its
traceback, and closes that one connection.
"""
