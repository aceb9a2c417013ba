"""The Python publisher (``from rtroute import RTopicPublisher``): routes on the publisher's
side and publishes once, straight to ``NAME.bindings``.

- :mod:`~rtroute.publisher.facade`: :class:`RTopicPublisher`, the thread-safe facade;
- :mod:`~rtroute.publisher.engine`: its ioloop side (routing, the relay, reconnects);
- :mod:`~rtroute.publisher.future`: :class:`MessageFuture` and the publish errors;
- :mod:`~rtroute.publisher.policy`: what a nack, a return or a failure means for a message;
- :mod:`~rtroute.publisher.publish_routed` and :mod:`~rtroute.publisher.message_options`:
  ``rtroute publish`` (``--route-locally``, ``--header``, ``--property``).

Its names load on first use (the publisher pulls in pika; ``rtroute publish``'s option parsing
does not).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rtroute.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from rtroute.publisher.facade import DELIVERIES, PUBLISHED_KEY_HEADER, RTopicPublisher
    from rtroute.publisher.future import (
        MessageFuture,
        PublisherClosed,
        PublishError,
        PublishFailed,
        PublishNacked,
        PublishReturned,
    )
    from rtroute.publisher.policy import PublisherPolicy

_SUBMODULE = {
    "DELIVERIES": "facade",
    "MessageFuture": "future",
    "PUBLISHED_KEY_HEADER": "facade",
    "PublishError": "future",
    "PublishFailed": "future",
    "PublishNacked": "future",
    "PublishReturned": "future",
    "PublisherClosed": "future",
    "PublisherPolicy": "policy",
    "RTopicPublisher": "facade",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _SUBMODULE)

__all__ = ["DELIVERIES", "PUBLISHED_KEY_HEADER", "MessageFuture", "PublishError", "PublishFailed",
           "PublishNacked", "PublishReturned", "PublisherClosed", "PublisherPolicy",
           "RTopicPublisher"]
