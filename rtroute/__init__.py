"""rtroute: RabbitMQ routing features (reverse topic, CC/BCC, shovel, divert) from outside the broker."""
from rtroute.routing import (
    DirectExchange,
    FanoutExchange,
    RouteResult,
    RTopicExchange,
    TopicExchange,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> type:  # lazy: the publisher pulls in pika
    if name == "RTopicPublisher":
        from rtroute.publisher.facade import RTopicPublisher
        return RTopicPublisher
    raise AttributeError(f"module 'rtroute' has no attribute {name!r}")


__all__ = [
    "DirectExchange",
    "FanoutExchange",
    "RTopicExchange",
    "RTopicPublisher",
    "RouteResult",
    "TopicExchange",
    "__version__",
]
