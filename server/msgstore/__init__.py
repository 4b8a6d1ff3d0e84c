"""msgstore: a durable, RocketMQ-compatible message store for Kubernetes."""

__version__ = "0.1.0"
