"""The relay's seams, typed: what the engine needs of the parts it is given.

The engine (:class:`~rtroute.relay.engine.Relay`) is built on three parts it does not make:

- an :class:`Upstream`: where items come from and are settled (the shovel's and the sidecar's
  :class:`~rtroute.relay.broker_upstream.BrokerUpstream`, consume channels of a broker; the
  publisher's :class:`~rtroute.relay.future_upstream.FutureUpstream`, callers' futures). One
  that takes the outcomes of publishes handed over in bulk is a :class:`BulkUpstream`;
- an :class:`ItemSettler` on each item (``item.settler``): what acks it once every publish of
  it is confirmed (an :class:`~rtroute.amqp.settle.Settler` per consume channel, or the
  :class:`~rtroute.relay.future_upstream.FutureUpstream` itself);
- a :class:`PublishReport` of each outcome, which the policy reads;
- a :class:`Sink` under the outbox: the publish channel the outbox writes to. The AMQP 0-9-1
  one (a channel, with or without its :class:`~rtroute.amqp.confirm_window.ConfirmWindow`) is
  :class:`~rtroute.relay.amqp_sink.AmqpSink`; the outbox itself knows no wire protocol, so a
  publisher of another protocol brings its own sink rather than a copy of the outbox.

Each is a :class:`typing.Protocol`: nothing has to inherit from it, and mypy checks the parts
given against it (``pyproject.toml``'s ``[tool.mypy]``, run by ``tests/test_typecheck.py``).
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rtroute.amqp.confirm_future import Outcome
    from rtroute.relay.outgoing import Item, Outgoing

__all__ = ["BulkUpstream", "ItemSettler", "PublishReport", "Settlement", "Sink",
           "Unpublishable", "Upstream"]


class Settlement(enum.Enum):
    """How an item is settled upstream (:meth:`Upstream.settle_as`; importable from
    :mod:`rtroute.relay.policy`, whose verdicts name it, too)."""

    ACK = "ack"
    """Acked with the turn's ``multiple`` ack."""
    REQUEUE = "requeue"
    """Requeued now with ``basic.reject`` (its handling failed)."""
    HOLD = "hold"
    """Parked, then requeued with ``basic.nack`` after the upstream's ``hold_delay``."""
    BACKOFF = "backoff"
    """Parked, then requeued with ``basic.nack`` after a delay that doubles each round until
    the destination accepts a message again."""
    DEAD_LETTER = "dead_letter"
    """``basic.nack`` without requeue when the source queue has a dead-letter exchange;
    otherwise as ``BACKOFF`` (nothing is dropped)."""
    LEAVE = "leave"
    """Nothing: its channel is going, and the broker redelivers it."""


class Unpublishable(Exception):
    """A sink cannot encode a publish (its properties have no encoding on the wire): it is
    never written; the policy's ``rejected`` gets ``str(exc)``."""


class PublishReport(Protocol):
    """What the policy is told of one publish's outcome: a sink's future (the AMQP sink's
    :class:`~rtroute.amqp.confirm_window.PublishFuture`), or a
    :class:`~rtroute.relay.bulk.PublishOutcome` for a publish that had none."""

    @property
    def context(self) -> Any: ...

    @property
    def outcome(self) -> Outcome | None: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def reply_code(self) -> int | None: ...

    @property
    def reply_text(self) -> str | None: ...


class ItemSettler(Protocol):
    """What settles one item upstream once its publishes have their outcomes (``item.settler``).

    ``track`` runs once per item, when it is submitted (the relay's ``submit`` calls it, in the
    order items come: a consume channel's delivery-tag order); ``ack`` once per item on the
    per-message path; ``park``/``unpark`` bracket a retry (later acks do not wait for a parked
    item)."""

    def track(self, item: Any) -> Any: ...

    def ack(self, item: Any) -> Any: ...

    def park(self, item: Any) -> Any: ...

    def unpark(self, item: Any) -> Any: ...


class Upstream(Protocol):
    """Where the relay's items come from and are settled (see the module docstring).

    ``idle``: no ack waits to go out and every item is settled or parked. ``stop``: the relay
    drains (its timers are cancelled); ``reset``: the connection is gone, forget every item."""

    @property
    def idle(self) -> bool: ...

    def park(self, item: Item) -> None: ...

    def unpark(self, item: Item) -> None: ...

    def settle_as(self, item: Item, settlement: Settlement) -> None: ...

    def stop(self) -> None: ...

    def reset(self) -> None: ...


@runtime_checkable
class BulkUpstream(Upstream, Protocol):
    """An upstream that also takes the items one confirm acked together, each its own single
    publish (:class:`~rtroute.relay.bulk.BulkFanIn`)."""

    def ack_many(self, items: Sequence[Item]) -> None: ...


class Sink(Protocol):
    """One publish channel under the outbox (see the module docstring).

    The outbox hands over :class:`~rtroute.relay.outgoing.Outgoing` publishes whose ``frames``
    were made for this sink (or encodes them with :meth:`encode`), and measures the ones not
    ``checked`` with :meth:`check` first.

    With ``confirms`` (a window of publishes awaiting their confirms):

    - :meth:`publish_frames` takes one publish and calls ``callback`` with its outcome (the
      per-message path: an implementation may make it the bound method of its window);
    - :meth:`publish_frames_in_bulk` takes many, outcomes reported by the window itself;
    - both raise one of ``full`` when the window has no room (the outbox then waits for
      ``on_writable``), or one of ``gone`` when the channel is going (the publish waits for
      the relay's detach to hand it back).

    Without confirms :meth:`write` takes the frames of one ioloop turn at once, and
    ``closing`` says when the channel cannot take them any more.
    """

    confirms: bool
    full: tuple[type[BaseException], ...]
    gone: tuple[type[BaseException], ...]

    @property
    def closing(self) -> bool: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def room(self) -> int: ...

    def check(self, out: Outgoing) -> str | None: ...

    def encode(self, out: Outgoing) -> tuple[bytes | list[bytes], int]: ...

    def publish_frames(self, exchange: str, routing_key: str, data: bytes | list[bytes],
                       frame_count: int, body: bytes | Callable[[], bytes] | None = None,
                       mandatory: bool = False, callback: Callable[[Any], Any] | None = None,
                       context: Any = None) -> Any: ...

    def publish_frames_in_bulk(self, messages: list[bytes], frame_count: int,
                               contexts: list) -> None: ...

    def write(self, data: bytes, frame_count: int) -> None: ...
