"""The Kafka wire protocol, pure: bytes in, messages out, no IO."""
