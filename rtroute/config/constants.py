"""The defaults and choices that the config checks, the commands and the benchmarks share, defined
once: a module of values that imports nothing, so that any part may use them without pulling a
parser in (the diverts' Artemis importer, the proxy's flags, ``rtroute bench``)."""

__all__ = ["DEFAULT_LISTEN", "DEFAULT_URI", "EXCHANGE_KINDS", "QUEUE_TYPES", "ROUTING_TYPES"]

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
# 8419: outside 9100-9999, the range Prometheus allocates to exporters (9419 is the RabbitMQ
# exporter's); the ops endpoint serves /metrics beside it on the same host. The examples and
# docs give each role its own port, so that they can share a host: 8419 the sidecar, 8420
# shovels, 8421 the proxy (tests/ops/test_ops_ports.py).
DEFAULT_LISTEN = "127.0.0.1:8419"
EXCHANGE_KINDS = ("rtopic", "topic", "direct", "fanout", "headers")
QUEUE_TYPES = ("classic", "quorum")
# a divert's routing_type, as Artemis spells it (rtroute.divert.copies says what each does)
ROUTING_TYPES = ("ANYCAST", "MULTICAST", "PASS", "STRIP")
