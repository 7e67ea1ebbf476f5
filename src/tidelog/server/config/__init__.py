"""Broker and topic configuration: Kafka's keys with their docs, defaults and validation,
dynamic broker configs, and the topic creation and alter-config policies."""
