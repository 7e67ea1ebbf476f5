"""The request handlers: handler groups of one family of Kafka APIs each (data, topics,
producer ids, configs, ACLs, SCRAM, log dirs, reassignment, transactions admin, the
cluster's control plane), the request helper they share, the handler table the broker
merges them into, and the dispatcher that routes each decoded request to its handler."""
