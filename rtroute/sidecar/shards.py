"""Sharded ingress: several replicas of the sidecar share one exchange's work.

An exchange with ``shards = N`` has N ingress queues (``rtroute.shard.NAME.0`` ...), fed by
``NAME.shards``, a consistent hash exchange on the routing key (see
:func:`rtroute.sidecar.layout.sharded_ingress_declarations`): one routing key always lands on
the same shard. Each shard queue has a single active consumer, so per-routing-key order holds
as it does with one ingress queue.

Every replica consumes every shard, each on a channel of its own (:class:`Shard`); the broker
makes one consumer per shard active and lets the others wait, and when a replica dies its
channels close and the broker hands each of its shards to a waiting replica at once.

Left alone, the replica that started first would stay active on every shard. The balancer
(:class:`ShardConsumers`) looks every ``BALANCE_INTERVAL`` seconds at which consumer is active
on which shard (the management API's ``/api/consumers``, whose view lags up to ~5 s) and, if
this replica holds more than its share (:func:`shards_to_release`), gives shards away. Giving a
shard away keeps order and makes no duplicate: its new deliveries are held (not routed), the
ones already republished are confirmed and acked, then its channel is closed, so the held
ones go back to the queue in order and the next consumer in line (another replica) becomes
active; the shard is then consumed anew, at the back of the line.

Everything runs in the ioloop thread of the sidecar's connection, except the look at the
management API, which runs in a thread of its own.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol

from rtroute.amqp import ManagementClient, ManagementError, Settler
from rtroute.sidecar.status import utc_timestamp

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange

LOG = logging.getLogger("rtroute.sidecar")

BALANCE_INTERVAL = 5.0  # seconds between two looks at who consumes which shard
RELEASE_COOLDOWN = 12.0  # after giving shards away, the API's view needs ~5 s to show it
RELEASE_TIMEOUT = 30.0  # a release waits at most this long for its republishes' confirms
TAG_PREFIX = "rtroute."


class ShardState(enum.Enum):
    OPENING = "opening"  # its channel is being opened
    CONSUMING = "consuming"  # consuming: active, or waiting for its turn
    RELEASING = "releasing"  # being given away (see the module docstring)


def new_replica_id() -> str:
    """A short id for this process, in its consumer tags (``rtroute.<id>.<n>``)."""
    return uuid.uuid4().hex[:12]


def replica_of(consumer_tag: str) -> str | None:
    """The replica id in an rtroute shard consumer tag, None for any other consumer."""
    if not consumer_tag.startswith(TAG_PREFIX):
        return None
    parts = consumer_tag.split(".")
    return parts[1] if len(parts) == 3 and parts[1] else None


def shards_to_release(consumers: Iterable[tuple[str, str, bool]], queues: Sequence[str],
                      me: str) -> int:
    """How many of its active shards replica ``me`` should give away now.

    Args:
        consumers: ``(queue, consumer tag, active)`` of the consumers of the shard queues.
        queues: the shard queues of the exchange.
        me: this replica's id.

    Each replica should hold ``N // R`` or ``N // R + 1`` of the ``N`` shards (``R``
    replicas: those with a consumer on a shard). Only the replica holding the most (the
    smallest id among equals) gives shards away, so two replicas never give away at once on
    the same view: down to ``ceil(N / R)`` at once, or one when another holds fewer than
    ``N // R`` (the shard goes to the next replica in the broker's line, which passes it on
    if it then holds too many).
    """
    wanted = set(queues)
    held: dict[str, int] = {}
    for queue, tag, active in consumers:
        replica = replica_of(tag)
        if queue not in wanted or replica is None:
            continue
        held[replica] = held.get(replica, 0) + (1 if active else 0)
    if me not in held or len(held) < 2:
        return 0
    most, fewest = max(held.values()), min(held.values())
    share = -(-len(queues) // len(held))
    if most <= share and (most - fewest <= 1 or fewest >= len(queues) // len(held)):
        return 0
    if min(r for r, n in held.items() if n == most) != me:
        return 0
    return most - share if most > share else 1


class ShardPipeline(Protocol):
    """What the shards need of the pipeline their deliveries go to (the sidecar's
    :class:`~rtroute.sidecar.pipeline.Pipeline`): a settler per channel, and the shards it reads
    deliveries for."""

    def settler_for(self, channel: Any) -> Settler: ...

    def forget_settler(self, settler: Settler) -> None: ...

    def add_shard(self, consumer_tag: str, shard: Shard) -> None: ...

    def remove_shard(self, consumer_tag: str, channel: Any) -> None: ...

    def batched(self, settler: Settler) -> bool: ...


class Shard:
    """One shard of one exchange, as this replica consumes it: its channel, consumer tag and
    settler (acks in tag order on that channel)."""

    def __init__(self, exchange: ManagedExchange, index: int) -> None:
        self.exchange = exchange
        self.index = index
        self.queue = exchange.spec.shard_queue(index)
        self.state = ShardState.OPENING
        self.channel: Any = None
        self.consumer_tag: str | None = None
        self.settler: Settler | None = None
        self.active: bool | None = None  # per the last look at the API (None: not known)
        self.received = 0  # deliveries routed from it, by this replica
        self.held = 0  # deliveries held while it was being given away
        self.last_delivery = 0.0  # time.time() of the last one
        self.release_started = 0.0

    def status(self) -> dict:
        return {"queue": self.queue, "state": self.state.value, "active": self.active,
                "consumer_tag": self.consumer_tag, "received": self.received,
                "last_delivery": utc_timestamp(self.last_delivery) if self.last_delivery
                else None}


class ShardConsumers:
    """The shards of every sharded exchange, consumed on this replica's connection, and their
    balancing (see the module docstring).

    Args:
        ioloop_connection: the sidecar's :class:`~rtroute.amqp.ReconnectingConnection`.
        pipeline: where deliveries go (:meth:`Pipeline.on_delivery`).
        management: the management API (None: no balancing; the broker's order decides).
        vhost: the exchanges' vhost.
        on_broken: called when a shard's channel is in a state only a reconnect mends.
        stopping: True once the sidecar stops.
        replica_id: this replica's id (default: a new random one).
    """

    def __init__(self, ioloop_connection: Any, pipeline: ShardPipeline,
                 management: ManagementClient | None, vhost: str,
                 on_broken: Callable[[], Any], stopping: Callable[[], bool],
                 replica_id: str | None = None) -> None:
        self._rc = ioloop_connection
        self._pipeline = pipeline
        self._management = management
        self._vhost = vhost
        self._on_broken = on_broken
        self._stopping = stopping
        self.replica_id = replica_id or new_replica_id()
        self.shards: dict[str, list[Shard]] = {}  # exchange name -> its shards
        self._connection: Any = None
        self._tags = 0
        self._last_release = -1e9
        self._looking = False
        self._timer: Any = None
        self.releases = 0  # shards given away so far
        self.balance_error: str | None = None

    # -- connection life cycle (ioloop thread) ---------------------------------------------------
    def attach(self, connection: Any) -> None:
        """A new connection: shards are opened by :meth:`consume`."""
        self._connection = connection
        for shards in self.shards.values():
            for shard in shards:
                self._forget(shard)
        if self._timer is None and self._management is not None and self.shards:
            self._schedule()

    def detach(self) -> None:
        """The connection is lost: every shard's deliveries are redelivered (to whichever
        replica the broker makes active)."""
        self._connection = None
        for shards in self.shards.values():
            for shard in shards:
                self._forget(shard)

    def register(self, ex: ManagedExchange) -> None:
        """Makes ``ex`` (a sharded exchange) known; its shards are opened by :meth:`consume`."""
        self.shards[ex.spec.name] = [Shard(ex, i) for i in range(ex.spec.shards)]

    def consume(self, ex: ManagedExchange) -> None:
        """Opens a channel per shard of ``ex`` and consumes its queue (idempotent)."""
        for shard in self.shards[ex.spec.name]:
            if shard.channel is None and shard.consumer_tag is None:
                self._open(shard)

    def cancel_all(self) -> None:
        """Stops consuming every shard (the sidecar stops; what is in flight settles)."""
        for shards in self.shards.values():
            for shard in shards:
                channel = shard.channel
                if shard.consumer_tag and channel is not None and channel.is_open:
                    channel.basic_cancel(shard.consumer_tag)

    def settlers(self) -> list[Settler]:
        return [s.settler for shards in self.shards.values() for s in shards
                if s.settler is not None]

    def status(self, name: str) -> list[dict] | None:
        shards = self.shards.get(name)
        return None if shards is None else [s.status() for s in shards]

    # -- one shard ---------------------------------------------------------------------------
    def _open(self, shard: Shard) -> None:
        connection = self._connection
        if connection is None or self._stopping():
            return
        shard.state = ShardState.OPENING
        shard.channel = connection.channel(
            on_open_callback=lambda channel: self._on_open(shard, connection, channel))

    def _on_open(self, shard: Shard, connection: Any, channel: Any) -> None:
        if connection is not self._connection or self._stopping():
            return
        channel.add_on_close_callback(lambda _ch, reason: self._on_closed(shard, channel,
                                                                           reason))
        channel.add_on_cancel_callback(lambda _frame: self._on_cancelled(shard))
        channel.basic_qos(prefetch_count=shard.exchange.spec.prefetch)
        self._tags += 1
        tag = f"{TAG_PREFIX}{self.replica_id}.{self._tags}"
        shard.channel = channel
        shard.consumer_tag = tag
        shard.settler = self._pipeline.settler_for(channel)
        shard.active = None
        self._pipeline.add_shard(tag, shard)
        # deliveries reach Pipeline.on_delivery through the frame reader; pika never sees them
        channel.basic_consume(shard.queue, self._on_unexpected_message, consumer_tag=tag)
        shard.state = ShardState.CONSUMING

    def _on_closed(self, shard: Shard, channel: Any, reason: Any) -> None:
        if shard.channel is not channel:
            return
        releasing = shard.state is ShardState.RELEASING
        self._forget(shard)
        if self._stopping() or self._connection is None:
            return
        if releasing:
            LOG.info("exchange %s: gave shard %s away (%d held deliveries back to the queue)",
                     shard.exchange.spec.name, shard.queue, shard.held)
            shard.held = 0
            self._open(shard)  # consumed again, at the back of the broker's line
            return
        LOG.warning("exchange %s: the channel of shard %s closed (%s): reconnecting",
                    shard.exchange.spec.name, shard.queue, reason)
        self._on_broken()

    def _on_cancelled(self, shard: Shard) -> None:
        if self._stopping():
            return
        LOG.warning("exchange %s: the broker cancelled the consumer of %s (queue deleted?): "
                    "reconnecting to declare it again", shard.exchange.spec.name, shard.queue)
        self._on_broken()

    def _forget(self, shard: Shard) -> None:
        """The shard's channel is gone: what it had not acked goes back to the queue."""
        if shard.consumer_tag is not None:
            self._pipeline.remove_shard(shard.consumer_tag, shard.channel)
        if shard.settler is not None:
            self._pipeline.forget_settler(shard.settler)
        shard.channel = None
        shard.consumer_tag = None
        shard.settler = None
        shard.active = None
        shard.state = ShardState.OPENING

    def release(self, shard: Shard) -> None:
        """Gives ``shard`` away: hold its new deliveries, let the republished ones be confirmed
        and acked, then close its channel (see the module docstring)."""
        if shard.state is not ShardState.CONSUMING:
            return
        shard.state = ShardState.RELEASING
        shard.release_started = time.monotonic()
        self.releases += 1
        LOG.info("exchange %s: giving shard %s away to balance the replicas",
                 shard.exchange.spec.name, shard.queue)
        self._close_when_settled(shard)

    def _close_when_settled(self, shard: Shard) -> None:
        if shard.state is not ShardState.RELEASING or shard.channel is None:
            return
        settler = shard.settler
        settled = settler is not None and len(settler) == 0 and settler.idle \
            and not self._pipeline.batched(settler)
        late = time.monotonic() - shard.release_started > RELEASE_TIMEOUT
        if not settled and not late:
            self._rc.ioloop.call_later(0.05, lambda: self._close_when_settled(shard))
            return
        if late and not settled:
            LOG.warning("exchange %s: shard %s: republishes still unconfirmed after %.0f s; "
                        "closing its channel anyway (they will be redelivered: at-least-once)",
                        shard.exchange.spec.name, shard.queue, RELEASE_TIMEOUT)
        if shard.channel.is_open:
            shard.channel.close()

    @staticmethod
    def _on_unexpected_message(channel: Any, method: Any, _props: Any, _body: Any) -> None:
        LOG.error("shard delivery %d bypassed the frame reader: closing its channel",
                  method.delivery_tag)
        channel.close()

    # -- balancing ---------------------------------------------------------------------------
    def _schedule(self) -> None:
        self._timer = self._rc.ioloop.call_later(BALANCE_INTERVAL, self._look)

    def _look(self) -> None:
        """Reads who consumes which shard in a thread, then decides in the ioloop."""
        self._timer = None
        if self._stopping():
            return
        if self._connection is None or self._looking:
            self._schedule()
            return
        self._looking = True
        management = self._management
        assert management is not None
        ioloop = self._rc.ioloop

        def work() -> None:
            consumers: list[dict] | None = None
            error = None
            try:
                consumers = management.consumers(self._vhost)
            except (ManagementError, OSError, ValueError) as exc:
                error = str(exc)
            try:
                ioloop.add_callback_threadsafe(lambda: self._decide(consumers, error))
            except Exception:  # noqa: BLE001 - the ioloop is gone: nothing to balance
                LOG.debug("shard balancing finished after the ioloop closed")

        threading.Thread(target=work, name="rtroute-shards", daemon=True).start()

    def _decide(self, consumers: list[dict] | None, error: str | None) -> None:
        self._looking = False
        if self._stopping():
            return
        self._schedule()
        if consumers is None:
            if error != self.balance_error:
                LOG.warning("cannot see who consumes the shards (%s): not balancing", error)
            self.balance_error = error
            return
        self.balance_error = None
        seen = [((c.get("queue") or {}).get("name", ""), c.get("consumer_tag", ""),
                 bool(c.get("active"))) for c in consumers]
        by_tag = {tag: active for _queue, tag, active in seen}
        for shards in self.shards.values():
            for shard in shards:
                if shard.consumer_tag is not None and shard.state is ShardState.CONSUMING:
                    shard.active = by_tag.get(shard.consumer_tag)
        if time.monotonic() - self._last_release < RELEASE_COOLDOWN:
            return
        for shards in self.shards.values():
            mine = [s for s in shards if s.consumer_tag is not None]
            if len(mine) < len(shards) or any(s.state is not ShardState.CONSUMING or
                                               s.consumer_tag not in by_tag for s in mine):
                continue  # a shard opening or being given away, or a view older than ours
            count = shards_to_release(seen, [s.queue for s in shards], self.replica_id)
            active = [s for s in mine if s.active]
            for shard in sorted(active, key=lambda s: -s.index)[:count]:
                self.release(shard)
                self._last_release = time.monotonic()
