"""The Kafka wire protocol, pure: bytes in, messages out, no IO.

Modules: ``framing`` (size-prefixed frames, ``FrameDecoder``), ``apis`` (``ApiKey``, the
advertised ``SUPPORTED_VERSIONS``), ``header`` (``RequestHeader``), ``codec`` (headers +
kio bodies, typed failures), ``schema_walk`` (the length checks before kio decodes),
``responses`` (hand-written Produce and Fetch encoders), ``errors`` (the exception
hierarchy), ``varint`` (the varint codecs), ``partitioner`` (murmur2), ``records`` (record
batch v2 header), ``control`` (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown: our own schemas), ``messages`` (``build``: kio entities of any version
from one version-independent description).
"""
