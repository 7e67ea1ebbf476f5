"""The Kafka wire protocol, pure: bytes in, messages out, no IO.

Modules: ``framing`` (size-prefixed frames, ``FrameDecoder``), ``apis`` (``ApiKey``, the
advertised ``SUPPORTED_VERSIONS``), ``codec`` (headers + kio bodies, typed failures),
``errors`` (the exception hierarchy), ``records`` (record batch v2 header), ``control``
(LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown: our own schemas).
"""
