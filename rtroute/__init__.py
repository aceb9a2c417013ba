"""rtroute: RabbitMQ routing features (reverse topic, CC/BCC, shovel, divert) from outside the broker."""
from rtroute.routing import (
    DirectExchange,
    FanoutExchange,
    RouteResult,
    RTopicExchange,
    TopicExchange,
)

__version__ = "0.1.0"
__all__ = [
    "DirectExchange",
    "FanoutExchange",
    "RTopicExchange",
    "RouteResult",
    "TopicExchange",
    "__version__",
]
