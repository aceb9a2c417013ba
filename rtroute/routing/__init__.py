"""Exchange semantics (rtopic, topic, direct, fanout) and CC/BCC, as pure logic."""
from rtroute.routing.exchanges import (
    EXCHANGE_TYPES,
    DirectExchange,
    FanoutExchange,
    RouteResult,
    RTopicExchange,
    TopicExchange,
    make_exchange,
)
from rtroute.routing.sender_selected import (
    PreconditionFailed,
    delivered_headers,
    extra_routing_keys,
)

__all__ = [
    "EXCHANGE_TYPES",
    "DirectExchange",
    "FanoutExchange",
    "PreconditionFailed",
    "RTopicExchange",
    "RouteResult",
    "TopicExchange",
    "delivered_headers",
    "extra_routing_keys",
    "make_exchange",
]
