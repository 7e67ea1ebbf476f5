"""tidelog: a replicated, partitioned commit log that speaks the Apache Kafka wire protocol.

Layers (docs/design.md), highest first; each imports only those below it:

    cli, spark            user-facing commands and the PySpark data source
    server                the asyncio shell: listener, handlers, replica manager, purgatories
    client, testing       the small Kafka client; the deterministic simulator
    controller            pure controller decisions + the ZooKeeper adapter (only kazoo user)
    storage               one partition's log on disk (blocking IO)
    replication, protocol the pure core (no IO, time as ``now_ms``) and the wire codecs

``model`` and ``errors`` are value types every layer shares.
"""

__version__ = "0.1.0"
