"""What an outcome means: the one place where sidecar, shovel and publisher differ.

The engine asks a :class:`Policy` about every publish that was not simply acked, and gets a
:class:`Verdict` back (its ``kind`` a :class:`VerdictKind`):

- ``OK``: it counts as done (e.g. a returned message the caller only counts);
- ``FAILED``: it failed; once every publish of its item has an outcome, the item is settled as
  :meth:`Policy.settlement` says (the sidecar: ``REQUEUE``);
- ``Retry(delay)``: publish the same message again after ``delay`` seconds, ahead of what waits
  (the item is parked meanwhile, so later acks do not wait for it);
- ``Replace(out)``: publish ``out`` in its place (the sidecar's dead letter of a returned
  copy); the item waits for that one instead;
- ``Settle(settlement)``: settle the item that way once its publishes have outcomes (the first
  ``Settle`` wins).

A :class:`Settlement` is applied by the upstream (:class:`~rtroute.relay.broker_upstream.
BrokerUpstream`): ack, requeue with ``basic.reject`` (counts towards a quorum queue's delivery
limit), hold then requeue, back off then requeue, dead-letter, or leave it to the broker.

Every hook runs in the ioloop thread.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, ClassVar

from rtroute.relay.seams import Settlement

if TYPE_CHECKING:
    from rtroute.relay.outgoing import Item, Outgoing
    from rtroute.relay.seams import PublishReport

__all__ = ["FAILED", "OK", "Hook", "Policy", "Replace", "Retry", "RetryWithBackoff", "Settle",
           "Settlement", "Verdict", "VerdictKind"]


class VerdictKind(str, enum.Enum):
    """What a :class:`Verdict` says (a ``str`` too: ``verdict.kind == "retry"`` holds)."""

    OK = "ok"
    """The publish counts as done."""
    FAILED = "failed"
    """The publish failed; its item is settled as :meth:`Policy.settlement` says."""
    SETTLE = "settle"
    """Settle the item as ``verdict.settlement`` once its publishes have outcomes."""
    RETRY = "retry"
    """Publish it again after ``verdict.delay`` seconds."""
    REPLACE = "replace"
    """Publish ``verdict.out`` in its place."""


class Verdict:
    """The meaning of one publish's outcome (see the module docstring); build them with
    :data:`OK`, :data:`FAILED`, :func:`Retry`, :func:`Replace` and :func:`Settle`."""

    __slots__ = ("delay", "kind", "out", "settlement")

    def __init__(self, kind: VerdictKind | str, *, delay: float = 0.0,
                 out: Outgoing | None = None, settlement: Settlement | None = None) -> None:
        self.kind = VerdictKind(kind)
        self.delay = delay
        self.out = out
        self.settlement = settlement

    def __repr__(self) -> str:
        detail = {VerdictKind.RETRY: self.delay, VerdictKind.REPLACE: self.out,
                  VerdictKind.SETTLE: self.settlement}.get(self.kind, "")
        return f"<Verdict {self.kind.value} {detail}>".replace(" >", ">")


OK = Verdict(VerdictKind.OK)
FAILED = Verdict(VerdictKind.FAILED)
_SETTLE = {settlement: Verdict(VerdictKind.SETTLE, settlement=settlement)
           for settlement in Settlement}


def Retry(delay: float) -> Verdict:
    """Publish the same message again after ``delay`` seconds."""
    return Verdict(VerdictKind.RETRY, delay=delay)


def Replace(out: Outgoing) -> Verdict:
    """Publish ``out`` instead; the item waits for its outcome."""
    return Verdict(VerdictKind.REPLACE, out=out)


def Settle(settlement: Settlement) -> Verdict:
    """Settle the item as ``settlement`` once all its publishes have outcomes."""
    return _SETTLE[settlement]


class Hook(str, enum.Enum):
    """A per-message hook of a :class:`Policy`: called only when the policy registers it in
    :attr:`Policy.hooks` (each costs a call per message)."""

    ACKED = "acked"
    ITEM_ACKED = "item_acked"
    PUBLISHED = "published"
    WRITTEN = "written"


class Policy:
    """The defaults: a nack, a failed publish or one the outbox could not send fails its item,
    which is then requeued (``REQUEUE``); a return counts as done. Subclasses override the
    hooks they need.

    :meth:`acked`, :meth:`item_acked`, :meth:`published` and :meth:`written` run once per
    message (or write), so the engine wires only those a policy registers in :attr:`hooks`
    (``hooks = frozenset({Hook.ACKED})``); one overridden but not registered is an error
    when the class is made, so none is silently never called."""

    #: the per-message hooks this policy has (see the class docstring)
    hooks: ClassVar[frozenset[Hook]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for hook in Hook:
            if getattr(cls, hook.value) is not getattr(Policy, hook.value) \
                    and hook not in cls.hooks:
                raise TypeError(f"{cls.__qualname__} overrides the per-message hook "
                                f"{hook.value}() without registering it: add Hook."
                                f"{hook.name} to its hooks")

    def acked(self, out: Outgoing) -> None:
        """The broker confirmed ``out`` (not returned)."""

    def item_acked(self, item: Item) -> None:
        """Every publish of ``item`` has its outcome and it is acked upstream (the sidecar
        measures its latency here)."""

    def published(self, out: Outgoing) -> None:
        """With confirms: ``out`` was handed to the window."""

    def written(self, count: int) -> None:
        """Without confirms: ``count`` publishes went to the socket in one write."""

    def returned(self, out: Outgoing, future: PublishReport) -> Verdict:
        """``out`` was mandatory and no queue took it (``future.reply_code``/``reply_text``)."""
        return OK

    def nacked(self, out: Outgoing, future: PublishReport) -> Verdict:
        """The broker nacked ``out``."""
        return FAILED

    def failed(self, out: Outgoing, future: PublishReport) -> Verdict:
        """The publish channel closed before ``out`` had an outcome (``future.reason``)."""
        return FAILED

    def rejected(self, out: Outgoing, reason: str) -> Verdict:
        """``out`` cannot be published (its content header exceeds ``frame_max``, or pika
        cannot encode its properties): it was never written."""
        return FAILED

    def unsent(self, out: Outgoing, reason: str) -> bool:
        """``out`` never went out and will not (its channel is gone, or the relay gives up on
        what waits: ``reason``). False (the default): forget it; the upstream forgets its item
        too, and a broker redelivers it. True: fail it now, as a publish whose channel closed
        before its confirm (:meth:`failed` decides what that means)."""
        return False

    def retrying(self, out: Outgoing) -> None:
        """``out`` is being published again after a :func:`Retry`."""

    def returned_unconfirmed(self, reply_code: int, reply_text: str) -> None:
        """A ``basic.return`` on a channel without confirms (the message is already settled
        upstream)."""

    def settlement(self, item: Item) -> Settlement:
        """How to settle ``item`` once a publish of it failed and no verdict said otherwise."""
        return Settlement.REQUEUE


class RetryWithBackoff(Policy):
    """A nacked publish is made again ``retries`` times, after ``delay`` seconds, doubling each
    time up to ``max_delay``; after that the message is *refused* and settled as ``refused``
    (``BACKOFF``: requeued after a growing wait; or ``DEAD_LETTER``). A returned message is
    settled as ``unroutable`` (``ACK`` drops it, ``HOLD`` requeues it after a wait, or
    ``DEAD_LETTER``); a message whose header cannot be published is refused at once. A failed
    publish (the channel closed) leaves its message to the broker (``LEAVE``).

    Args:
        retries: republishes after a nack before the message is refused.
        delay: seconds before the first republish.
        max_delay: longest wait between two republishes.
        refused: how a refused message is settled.
        unroutable: how a returned message is settled.
    """

    def __init__(self, retries: int, delay: float, max_delay: float = 30.0,
                 refused: Settlement = Settlement.BACKOFF,
                 unroutable: Settlement = Settlement.DEAD_LETTER) -> None:
        self.retries = retries
        self.delay = delay
        self.max_delay = max_delay
        self.on_refused = _SETTLE[refused]
        self.on_unroutable = _SETTLE[unroutable]

    def refused(self, out: Outgoing, why: str) -> None:
        """``out`` is refused (``why``: ``"nacked"`` after its retries, or the reason it cannot
        be published) and settled as ``refused``."""

    def returned(self, out: Outgoing, future: PublishReport) -> Verdict:
        return self.on_unroutable

    def nacked(self, out: Outgoing, future: PublishReport) -> Verdict:
        item: Any = out.item or out
        attempts = item.attempts
        if attempts >= self.retries:
            self.refused(out, "nacked")
            return self.on_refused
        item.attempts = attempts + 1
        return Retry(min(self.max_delay, self.delay * 2 ** attempts))

    def failed(self, out: Outgoing, future: PublishReport) -> Verdict:
        return _SETTLE[Settlement.LEAVE]

    def rejected(self, out: Outgoing, reason: str) -> Verdict:
        self.refused(out, reason)
        return self.on_refused
