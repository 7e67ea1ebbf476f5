"""The request handlers: one handler group per family of Kafka APIs (data, topics, configs,
ACLs, SCRAM, log dirs, reassignment, transactions admin), and the version-independent response
builder they share."""
