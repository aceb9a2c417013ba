"""The optional message filter of a shovel: a selector and/or a routing-key pattern.

The source side (:mod:`rtroute.shovel.source`) asks :meth:`MessageFilter.matches` of each
delivery; the properties are decoded (without loss) only when a selector needs them, the body
only when the selector reads it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rtroute.amqp import frames
from rtroute.amqp.content_header import decode_properties
from rtroute.config.shovel import ShovelConfig

if TYPE_CHECKING:
    from rtroute.selector import MessageFacts, Selector
    from rtroute.shovel.source import SourceDelivery

__all__ = ["MessageFilter"]


class MessageFilter:
    """The optional message filter (selector and/or key pattern)."""

    def __init__(self, config: ShovelConfig) -> None:
        spec = config.filter
        assert spec is not None
        self.leave = spec.on_mismatch == "leave"
        self._selector: Selector | None = None
        self._facts: type[MessageFacts] | None = None
        if spec.selector is not None:
            from rtroute.selector import MessageFacts, compile

            self._selector = compile(spec.selector)
            self._facts = MessageFacts
        self._key_matcher = None
        if spec.key is not None:
            from rtroute.core import ForwardMatcher, ReverseMatcher

            matcher = ForwardMatcher() if spec.kind == "topic" else ReverseMatcher()
            matcher.add(spec.key)
            self._key_matcher = matcher

    def matches(self, entry: SourceDelivery) -> bool:
        """Whether the message passes the key pattern and the selector."""
        if self._key_matcher is not None:
            key = entry.source_key[1:].decode("utf-8", "replace")
            if not self._key_matcher.match(key):
                return False
        if self._selector is not None and self._facts is not None:
            header = entry.parts[0]
            properties = decode_properties(header)  # without loss: a double stays a double
            facts = self._facts(properties=properties, body_size=frames.body_size(header),
                                exchange=entry.source_exchange[1:].decode("utf-8", "replace"))
            body = frames.body_of(entry.parts) if self._selector.needs_body else None
            return bool(self._selector.matches(properties.headers or {}, message=facts,
                                               body=body))
        return True
