"""Know the bindings of one exchange (e.g. ``logs.bindings``) as RabbitMQ changes them.

How it stays exact without a gap:

1. On :meth:`BindingWatcher.start` the watcher opens its own channel on the caller's
   ``SelectConnection``, declares an exclusive server-named queue, binds it to
   ``amq.rabbitmq.event`` (``binding.*``, ``queue.deleted``, ``exchange.deleted``) and consumes it,
   sending all of it at once: the binds and the consume name the queue ``""`` (AMQP's "the queue
   last declared on this channel"). However soon the channel is then closed, the broker attaches
   the consumer first, and the auto-delete queue goes with it; a queue left without a consumer
   would stay, bound to the event exchange, until the connection closes.
2. Only after the consume is confirmed (the binds before it are done then) does it list the
   bindings through the management API, in a worker thread (HTTP must not block the ioloop); the
   result is handed back to the ioloop with ``add_callback_threadsafe``.
3. Events that arrive while the listing runs are buffered, then replayed on top of the listing.
   Every change made after the event queue was bound produces an event, and every change made
   before is in the listing; replaying the buffered events in order (adds and removes are
   idempotent set operations) ends with each binding in the state of its last change.
4. The watcher re-lists every ``relist_interval`` seconds the same way, as a fallback. If the
   event exchange is absent (the ``rabbitmq_event_exchange`` plugin is off, or the connection's
   vhost has no ``amq.rabbitmq.event``) it polls every ``poll_interval`` seconds instead.

Observed on RabbitMQ 3.10.8 (and relied on only as far as step 3 needs): event headers carry
``source_name``, ``source_kind``, ``destination_name``, ``destination_kind``, ``routing_key``,
``vhost``, ``arguments`` and ``name`` (for ``queue.deleted``/``exchange.deleted``); deleting a
queue or a destination exchange emits ``binding.deleted`` for each of its bindings besides the
``queue.deleted``/``exchange.deleted``; ``arguments`` arrive as Erlang terms in text
(``'{<<"x">>,signedint,1}'``), not as a table.

Everything here runs in the connection's ioloop thread, and so do the callbacks.

Size: the subscription, the listing, the buffered replay and the reconciliation are one protocol
(steps 1-4) over one table, whether the events come from the watcher's own channel or from a
shared :class:`~rtroute.amqp.event_feed.EventFeed`; split, the gap-free rule would span modules.

Callbacks can arrive late: pika still answers a request made before ``channel.close()``, opens a
channel whose open was requested before :meth:`BindingWatcher.stop`, and reports closes of
channels the watcher has let go. Only the channel in ``_channel`` is the watcher's; every
channel callback first checks that it is about that channel, so a late one does nothing, and a
channel that opens when it is no longer wanted is closed.
"""
from __future__ import annotations

import enum
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Callable, NamedTuple

from rtroute.amqp.binding_table import BindingTable
from rtroute.amqp.binding_table import Entry as _Entry
from rtroute.amqp.event_feed import EVENT_EXCHANGE, EVENT_KEYS, EventFeed, RelayedFeed
from rtroute.amqp.management import ManagementClient, ManagementError, NotFound
from rtroute.amqp.management_listing import ListingProgress

__all__ = ["RELIST_WITH_EVENTS", "Binding", "BindingWatcher", "WatcherState"]

LOGGER = logging.getLogger(__name__)
# listings of the management API a process makes at once, whatever the number of watchers:
# thousands at once (a proxy following thousands of exchanges) overwhelm the API, which then
# times out and drops connections for everyone
LISTINGS_AT_ONCE = threading.BoundedSemaphore(4)
# seconds between re-listings while events flow: a rare reconciliation (the events keep the
# bindings current; a listing of 100,000 bindings costs the broker seconds of CPU)
RELIST_WITH_EVENTS = 300.0



class Binding(NamedTuple):
    """A binding as the watcher reports it (arguments aside)."""

    destination: str
    destination_type: str  # "queue" or "exchange"
    binding_key: str


class WatcherState(enum.Enum):
    """What the watcher is doing."""

    IDLE = "idle"
    STARTING = "starting"  # subscribing to events and/or listing for the first time
    FOLLOWING = "following"  # listed, following the event exchange
    POLLING = "polling"  # listed, no event exchange: re-listing every poll_interval
    DETACHED = "detached"  # its connection closed; call start() with the new one
    STOPPED = "stopped"


# An entry (_Entry) identifies one binding exactly: a Binding plus its arguments, normalised so
# that the management API's JSON and the event's Erlang text give the same value for simple
# arguments.
Listener = Callable[[Binding], Any]
KeyListener = Callable[[str], Any]


class BindingWatcher:
    """The current set of bindings whose source is ``exchange``, with change callbacks.

    Args:
        exchange: the exchange whose (source) bindings to follow, e.g. ``"logs.bindings"``.
        management: a :class:`ManagementClient` for the same broker.
        vhost: the exchange's vhost (events of other vhosts are ignored).
        on_add, on_remove: ``callback(binding)`` when a :class:`Binding` appears / disappears.
        on_table: ``callback(bindings)`` when a listing fills an empty table (the first one):
            ``bindings`` iterates the listing's :class:`Binding` objects, once, during the call,
            and ``on_add`` is not called for them (a proxy builds its 100,000s of bindings in
            one go instead of one callback each); changes after it come through ``on_add`` and
            ``on_remove`` as before.
        on_key_add, on_key_remove: ``callback(binding_key)`` when a key gets its first binding /
            loses its last (what a router that delivers by key needs).
        on_ready: ``callback()`` once, after the first listing has been applied.
        relist_interval: seconds between fallback re-listings while following events.
        poll_interval: seconds between listings when there is no event exchange.
        use_events: False to poll only.
        retry_delay: seconds before retrying a failed listing or a lost event channel.
        on_current: ``callback(current)``: False when the watcher stops seeing every change
            (its event subscription lost: until the next listing, a change may be missed),
            True when a listing made it current again (after each such gap, and the first).
        feed: an :class:`~rtroute.amqp.event_feed.EventFeed` shared with other watchers of the
            same connection (its owner starts it on each connection before the watchers):
            no channel and no event queue of the watcher's own.
        small: the exchange holds few bindings (the proxy's own registry and sync exchanges):
            always listed alone, never read from a vhost's definitions export
            (:class:`~rtroute.amqp.definitions_export.DefinitionsExports`), which costs the
            whole vhost.

    Callbacks run in the ioloop thread; an exception in one is logged and ignored. Call
    :meth:`start`, :meth:`stop`, :meth:`relist_soon` and read :attr:`bindings` in that thread too
    (from elsewhere, hand a function to ``connection.ioloop.add_callback_threadsafe``).

    Typical use in a SelectConnection application (the sidecar)::

        watcher = BindingWatcher("logs.bindings", ManagementClient.from_amqp_uri(uri),
                                 on_key_add=trie.add, on_key_remove=trie.remove,
                                 on_ready=start_consuming)
        ReconnectingConnection(uri, on_ready=lambda conn, ch, q: watcher.start(conn)).run()

    Size: one state machine (subscribe, list, buffer, follow, re-list) whose events come from
    its own channel or from a shared feed through the same few entry points; splitting it
    would split the gap-free rule across classes.
    """

    def __init__(
        self,
        exchange: str,
        management: ManagementClient,
        vhost: str = "/",
        on_add: Listener | None = None,
        on_remove: Listener | None = None,
        on_key_add: KeyListener | None = None,
        on_key_remove: KeyListener | None = None,
        on_ready: Callable[[], Any] | None = None,
        relist_interval: float = 60.0,
        poll_interval: float = 5.0,
        use_events: bool = True,
        retry_delay: float = 2.0,
        feed: EventFeed | RelayedFeed | None = None,
        on_current: Callable[[bool], Any] | None = None,
        small: bool = False,
        on_table: Callable[[Iterable[Binding]], Any] | None = None,
    ) -> None:
        self.exchange = exchange
        self.small = small
        self.vhost = vhost
        self._management = management
        self._add_listeners: list[Listener] = [on_add] if on_add else []
        self._remove_listeners: list[Listener] = [on_remove] if on_remove else []
        self._key_add_listeners: list[KeyListener] = [on_key_add] if on_key_add else []
        self._key_remove_listeners: list[KeyListener] = [on_key_remove] if on_key_remove else []
        self._on_ready = on_ready
        self._on_table = on_table
        self._on_current = on_current
        self._current = False
        self.relist_interval = relist_interval
        self.poll_interval = poll_interval
        self.retry_delay = retry_delay
        self._use_events = use_events
        self._feed = feed
        self._table = BindingTable()  # the one copy of the bindings (see its module)
        self._key_counts: dict[str, int] = {}  # only with key listeners
        self._connection: Any = None
        self._channel: Any = None  # the event channel in use, from the open request on
        self._events = False
        self._buffer: list[tuple[str, Any]] | None = None
        self._listing_generation = 0
        self._listing_running = False
        self._relist_again = False
        self._timer: Any = None
        self._ready = False
        self.state = WatcherState.IDLE
        self.events_received = 0
        self.listings = 0
        self.last_error: str | None = None
        # the listing running now, or the last one (how far it is: see progress())
        self.listing: ListingProgress | None = None
        # listings that disagreed with what the events had shown, and the last one's summary
        self.disagreements = 0
        self.last_disagreement: str | None = None
        self._unconfirmed_removals: set[_Entry] = set()
        # the events have kept the table exact since a listing of this subscription
        self._exact = False
        # bindings that remove events named since the last listing: the listing settles them
        self._removed_by_events: set[tuple[str, str, str]] = set()

    # -- public --------------------------------------------------------------------------------

    @property
    def bindings(self) -> frozenset[Binding]:
        """The bindings known now."""
        return frozenset(Binding(*b) for b in self._table.bindings())

    @property
    def binding_keys(self) -> frozenset[str]:
        """The distinct binding keys known now."""
        return frozenset(self._table.keys())

    @property
    def ready(self) -> bool:
        """True once a first listing has been applied (stays True across reconnects)."""
        return self._ready

    @property
    def current(self) -> bool:
        """True while the watcher sees every change (listed, and its events flowing)."""
        return self._current

    def progress(self) -> str | None:
        """While the bindings are not known (the first listing, or a re-listing after the
        event subscription was lost): one line saying how far the listing is, or why it
        failed (e.g. ``"bindings of 'x.bindings': 120,000 of ~300,000 read (9 s)"``); None once
        they are known. Any thread may call it."""
        if self._ready and self._current:
            return None
        listing = self.listing
        if listing is None:
            return f"bindings of {self.exchange!r}: not listed yet"
        text = listing.describe()
        if listing.phase == "failed" and not self._listing_running:
            text += "; retrying"
        return text

    @property
    def listing_running(self) -> bool:
        """A listing is in flight (asked, being read or applied)."""
        return self._listing_running

    def start(self, connection: Any) -> None:
        """Start (or, after a reconnect, resume) watching on an open SelectConnection.

        Call in the connection's ioloop thread. The known bindings are kept across restarts;
        the next listing reports only the differences.
        """
        self._cancel_timer()
        self._listing_generation += 1  # a listing still running for an old connection is void
        self._listing_running = False
        self._release_channel()  # a restart on the same connection must not leave one open
        self._connection = connection
        self._exact = False  # events were missed while detached: the next listing is the truth
        self.state = WatcherState.STARTING
        if self._feed is not None:
            self._events = False
            self._feed.attach(self)  # lists once the feed is subscribed (at once if it is)
        elif self._use_events:
            channel = connection.channel(on_open_callback=self._on_channel_open)
            channel.add_on_close_callback(self._on_channel_closed)
            self._channel = channel
        else:
            self._events = False
            self._start_listing()

    def stop(self) -> None:
        """Stop watching (ioloop thread): cancel timers, close the watcher's channel (one still
        opening is closed as soon as it opens). Callbacks that arrive later do nothing."""
        self.state = WatcherState.STOPPED
        self._listing_generation += 1
        self._listing_running = False
        self._cancel_timer()
        self._release_channel()
        if self._feed is not None:
            self._feed.detach(self)

    def relist_soon(self, delay: float = 0.5) -> None:
        """Re-list within ``delay`` seconds (after a running listing, if any)."""
        if self.state in (WatcherState.STOPPED, WatcherState.DETACHED, WatcherState.IDLE):
            return
        if self._listing_running:
            self._relist_again = True
            return
        self._schedule(delay, self._start_listing)

    # -- event subscription --------------------------------------------------------------------

    def _release_channel(self) -> None:
        # from here on the channel's callbacks find it is not ours; one still opening is closed
        # by _on_channel_open, one closing already needs nothing
        channel, self._channel = self._channel, None
        if channel is not None and channel.is_open:
            channel.close()

    def _on_channel_open(self, channel: Any) -> None:
        if channel is not self._channel:  # stopped, or started again, while it opened
            channel.close()
            return

        def cancelled(_frame: Any) -> None:
            # the broker cancels the consumer when its queue goes (deleted by an operator, its
            # node restarted): nothing would arrive, silently. The channel is closed instead,
            # and, as for any lost event channel, the watcher subscribes again and lists
            if channel is self._channel and channel.is_open:
                LOGGER.warning("binding watcher for %s: the broker cancelled the event consumer "
                               "(its queue was deleted?); resubscribing", self.exchange)
                channel.close()

        channel.add_on_cancel_callback(cancelled)
        # no callbacks (nowait) but the last: a failed bind closes the channel all the same
        channel.queue_declare("", exclusive=True, auto_delete=True)
        for key in EVENT_KEYS:
            channel.queue_bind("", EVENT_EXCHANGE, key)
        channel.basic_consume("", self._on_event, auto_ack=True,
                              callback=functools.partial(self._on_subscribed, channel))

    def _on_subscribed(self, channel: Any, _frame: Any) -> None:
        if channel is not self._channel:  # stopped, or started again, meanwhile
            return
        self._events = True
        self._start_listing()  # only now: every later change has an event queued for us

    def _on_channel_closed(self, channel: Any, reason: Exception) -> None:
        if channel is not self._channel:
            return
        self._channel = None
        self._exact = False
        if self.state is WatcherState.STOPPED:
            return
        self._set_current(False)
        connection = self._connection
        if connection is None or not connection.is_open:
            self.state = WatcherState.DETACHED
            self._listing_generation += 1
            self._cancel_timer()
            return
        reply_code = getattr(reason, "reply_code", None)
        if reply_code == 404 and not self._events:
            LOGGER.warning("%s is absent in vhost of the connection: polling %s every %.1f s",
                           EVENT_EXCHANGE, self.exchange, self.poll_interval)
            self._events = False
            self._start_listing()
            return
        self.last_error = f"event channel closed: {reason!r}"
        LOGGER.warning("binding watcher for %s: %s; resubscribing", self.exchange,
                       self.last_error)
        self._events = False
        # the resubscription lists anyway; a listing still running would replace its timer
        self._listing_generation += 1
        self._listing_running = False
        self._schedule(self.retry_delay, lambda: self._resubscribe(connection))

    def _resubscribe(self, connection: Any) -> None:
        if connection.is_open:
            self.start(connection)
        else:  # lost while the retry was due: the reconnect calls start() with the new one
            self.state = WatcherState.DETACHED

    def _on_event(self, channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        if channel is not self._channel:  # a delivery on a channel the watcher let go
            return
        self._feed_event(method.routing_key, properties.headers or {})

    # -- a shared event feed (rtroute.amqp.event_feed): the feed calls these ---------------------

    def _feed_subscribed(self) -> None:
        """The feed's consumer is attached: every later change has an event queued."""
        if self.state in (WatcherState.STOPPED, WatcherState.DETACHED):
            return
        self._events = True
        # a listing running now (a poll's) may have been read before the subscription: void
        self._listing_generation += 1
        self._listing_running = False
        self._start_listing()

    def _feed_absent(self) -> None:
        """The vhost has no event exchange: poll."""
        if self.state in (WatcherState.STOPPED, WatcherState.DETACHED):
            return
        self._events = False
        self._start_listing()

    def _feed_lost(self, reason: str) -> None:
        """The feed's channel is gone: events are being missed until it subscribed again
        (then :meth:`_feed_subscribed` lists)."""
        self._exact = False
        self._events = False
        if self.state is WatcherState.STOPPED:
            return
        self._set_current(False)
        self.last_error = reason
        self._listing_generation += 1  # a listing still running is void
        self._listing_running = False
        self._buffer = None
        self._cancel_timer()
        connection = self._connection
        self.state = WatcherState.STARTING if connection is not None and connection.is_open \
            else WatcherState.DETACHED

    def _feed_event(self, kind: str, headers: dict[str, Any]) -> None:
        event = self._parse_event(kind, headers)
        if event is None:
            return
        self.events_received += 1
        if self._buffer is not None:
            self._buffer.append(event)
        if self._ready:
            self._apply_live(event)

    def _parse_event(self, kind: str, headers: dict[str, Any]) -> tuple[str, Any] | None:
        if headers.get("vhost") != self.vhost:
            return None
        if kind in ("binding.created", "binding.deleted"):
            if headers.get("source_name") != self.exchange:
                return None
            entry = (
                str(headers.get("destination_name", "")),
                str(headers.get("destination_kind", "")),
                str(headers.get("routing_key", "")),
                _event_arguments(headers.get("arguments")),
            )
            return ("add" if kind == "binding.created" else "remove", entry)
        if kind == "queue.deleted":
            return ("drop", (str(headers.get("name", "")), "queue"))
        if kind == "exchange.deleted":
            name = str(headers.get("name", ""))
            return ("clear", None) if name == self.exchange else ("drop", (name, "exchange"))
        return None

    # -- listing -------------------------------------------------------------------------------

    def _start_listing(self) -> None:
        if self.state in (WatcherState.STOPPED, WatcherState.DETACHED):
            return
        if self._listing_running:
            self._relist_again = True
            return
        self._listing_generation += 1
        generation = self._listing_generation
        self._listing_running = True
        self._buffer = []
        ioloop = self._connection.ioloop
        management, exchange, vhost = self._management, self.exchange, self.vhost
        small = self.small
        last = self.listing
        expected = last.total if last is not None and last.total is not None else \
            (last.expected if last is not None else None)
        progress = self.listing = ListingProgress(f"bindings of {exchange!r}", expected)

        def work() -> None:
            try:
                with LISTINGS_AT_ONCE:
                    progress.started = time.monotonic()  # its turn came
                    # "[]" is also the answer for an exchange that does not exist here
                    management.exchange(exchange, vhost)
                    rows: Any = BindingTable()
                    for row in management.iter_exchange_bindings(exchange, vhost, progress,
                                                                 export=not small):
                        rows.add((row.destination, row.destination_type, row.routing_key,
                                  _listed_arguments(row.arguments)))
                error = None
            except NotFound:
                rows, error = None, (f"exchange {exchange!r} does not exist in vhost {vhost!r} "
                                     "according to the management API (deleted meanwhile, or "
                                     "the API is another broker's?)")
            except ManagementError as exc:
                rows, error = None, str(exc)
            except Exception as exc:  # noqa: BLE001 - the thread must always report back
                rows, error = None, repr(exc)
            if error is not None and progress.phase != "failed":
                progress.finish(error)
            try:
                ioloop.add_callback_threadsafe(lambda: self._on_listing(generation, rows, error))
            except Exception:  # noqa: BLE001 - the ioloop is gone: nobody to report to
                LOGGER.debug("listing of %s finished after its ioloop closed", exchange)

        threading.Thread(target=work, name=f"rtroute-list-{exchange}", daemon=True).start()

    def _on_listing(self, generation: int, listed: BindingTable | None,
                    error: str | None) -> None:
        if generation != self._listing_generation:
            return
        self._listing_running = False
        buffered, self._buffer = self._buffer or [], None
        if error is not None:
            self.last_error = error
            LOGGER.warning("listing bindings of %s failed: %s", self.exchange, error)
            self._schedule(self.retry_delay if not self._ready else self._interval(),
                           self._start_listing)
            return
        self.listings += 1
        entries = listed if listed is not None else BindingTable()
        for event in buffered:
            entries.apply(event)
        if self._exact and self._events:
            self._reconcile(entries)
        listing = self.listing
        if listing is not None:
            listing.phase, listing.rows = "applying", 0
        self._replace_all(entries, listing)
        if listing is not None:
            listing.phase = "done"
        self._set_current(True)
        self._exact = self._events
        self._removed_by_events = set()
        self.state = WatcherState.FOLLOWING if self._events else WatcherState.POLLING
        if not self._ready:
            self._ready = True
            if self._on_ready is not None:
                self._call(self._on_ready)
        if self._relist_again:
            self._relist_again = False
            self._schedule(0.1, self._start_listing)
        else:
            self._schedule(self._interval(), self._start_listing)

    def _set_current(self, current: bool) -> None:
        if current != self._current:
            self._current = current
            if self._on_current is not None:
                self._call(self._on_current, current)

    def _interval(self) -> float:
        return self.relist_interval if self._events else self.poll_interval

    def _reconcile(self, listed: BindingTable) -> None:
        """What to keep when a re-listing differs from the table the events have kept.

        While events flow, the table is exact and a re-listing is only a fallback, so a
        difference is news: an event was lost, or the listing is wrong. It is reported (log,
        :attr:`disagreements`, :attr:`last_disagreement`) and applied cautiously: bindings only
        the listing has are added at once (a key too many costs nothing: RabbitMQ resolves the
        keys to queues); bindings only the table has are removed only when the next listing
        lacks them too, so one bad listing never empties a known table.
        """
        # entries that differ only in how their arguments normalised are the same bindings
        settled = self._removed_by_events
        self._removed_by_events = set()
        unlisted = {e for b in self._table.missing_from(listed) if b not in settled
                    for e in self._table.entries_of(*b)}
        added = {e for b in listed.missing_from(self._table) for e in listed.entries_of(*b)}
        removable = unlisted & self._unconfirmed_removals
        self._unconfirmed_removals = unlisted - removable
        if not unlisted and not added:
            return
        self.disagreements += 1
        kept = unlisted - removable
        self.last_disagreement = (
            f"listing of {self.exchange!r} differs from the events: {len(added)} listed "
            f"bindings no event showed (added), {len(unlisted)} known bindings not listed "
            f"({len(removable)} removed, missing from two listings in a row; {len(kept)} kept "
            "until the next listing)")
        LOGGER.warning("binding watcher: %s; e.g. %s", self.last_disagreement,
                       ", ".join(repr(Binding(*e[:3])) for e in list(unlisted ^ added)[:3]))
        for entry in kept:
            listed.add(entry)

    # -- state changes -------------------------------------------------------------------------

    def _apply_live(self, event: tuple[str, Any]) -> None:
        action, payload = event
        if action == "add":
            if self._table.add(payload) == 2:
                self._binding_added(Binding(*payload[:3]))
        elif action == "remove":
            self._removed_by_events.add(payload[:3])
            if self._table.remove(payload) == 2:
                self._binding_removed(Binding(*payload[:3]))
            elif self._table.has_binding(*payload[:3]):
                # another entry for the same binding: a binding with other arguments, or the
                # same one whose arguments normalised differently; a listing tells which
                self.relist_soon()
        elif action == "drop":
            for key in self._table.drop(*payload):
                self._binding_removed(Binding(payload[0], payload[1], key))
        else:
            for binding in self._table.clear():
                self._binding_removed(Binding(*binding))

    def _replace_all(self, table: BindingTable, listing: ListingProgress | None = None) -> None:
        """``table`` becomes the watcher's (one copy of the bindings, not two); the listeners
        hear of the bindings it lacks, then of those it adds."""
        old, self._table = self._table, table
        whole = self._on_table is not None and not len(old)
        if whole:  # a first table: handed whole to on_table, instead of on_add for each
            self._call(self._on_table, (Binding(*binding) for binding in table.bindings()))
        for binding in list(old.missing_from(table)):
            self._binding_removed(Binding(*binding))
        count = 0
        keys = bool(self._key_add_listeners or self._key_remove_listeners)
        for count, binding in enumerate(table.missing_from(old) if keys or not whole else (), 1):
            self._binding_added(Binding(*binding), listeners=not whole)
            if listing is not None and not count % 1000:
                listing.rows = count
        if listing is not None:
            listing.rows = len(table)

    def _binding_added(self, binding: Binding, listeners: bool = True) -> None:
        if listeners:
            for listener in self._add_listeners:
                self._call(listener, binding)
        if not self._key_add_listeners and not self._key_remove_listeners:
            return  # no key counts to keep
        key = binding.binding_key
        key_count = self._key_counts.get(key, 0)
        self._key_counts[key] = key_count + 1
        if not key_count:
            for key_listener in self._key_add_listeners:
                self._call(key_listener, key)

    def _binding_removed(self, binding: Binding) -> None:
        for listener in self._remove_listeners:
            self._call(listener, binding)
        if not self._key_add_listeners and not self._key_remove_listeners:
            return
        key = binding.binding_key
        key_count = self._key_counts[key] - 1
        if key_count:
            self._key_counts[key] = key_count
            return
        del self._key_counts[key]
        for key_listener in self._key_remove_listeners:
            self._call(key_listener, key)

    # -- helpers -------------------------------------------------------------------------------

    def _schedule(self, delay: float, callback: Callable[[], Any]) -> None:
        """The watcher's one timer: scheduling replaces (cancels) the pending one."""
        self._cancel_timer()
        if self._connection is None:
            return

        def fire() -> None:
            self._timer = None
            callback()

        self._timer = self._connection.ioloop.call_later(delay, fire)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._connection is not None:
            self._connection.ioloop.remove_timeout(self._timer)
        self._timer = None

    @staticmethod
    def _call(callback: Callable[..., Any], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            LOGGER.exception("binding watcher callback %r failed", callback)


_ERLANG_ARGUMENT_RE = re.compile(r'^\{<<"(?P<name>(?:[^"\\]|\\.)*)">>,(?P<type>\w+),(?P<value>.*)\}$',
                                 re.DOTALL)
_ERLANG_INT_TYPES = {"signedint", "long", "short", "byte", "unsignedbyte", "unsignedshort",
                     "unsignedint", "timestamp"}


def _event_arguments(arguments: Any) -> tuple:
    """Normalise the ``arguments`` header of a binding event (Erlang terms as text)."""
    if not arguments:
        return ()
    if isinstance(arguments, dict):
        return _listed_arguments(arguments)
    normalised = []
    for item in arguments if isinstance(arguments, (list, tuple)) else [arguments]:
        text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
        match = _ERLANG_ARGUMENT_RE.match(text)
        if match is None:
            normalised.append(("?", text))
            continue
        kind, raw = match["type"], match["value"]
        value: Any = "?" + raw
        if kind in ("longstr", "binary") and raw.startswith('<<"') and raw.endswith('">>'):
            value = raw[3:-3]
        elif kind in _ERLANG_INT_TYPES and re.fullmatch(r"-?\d+", raw):
            value = int(raw)
        elif kind == "bool" and raw in ("true", "false"):
            value = raw == "true"
        elif kind in ("float", "double"):
            try:
                value = float(raw)
            except ValueError:
                pass
        normalised.append((match["name"], _typed(value)))
    return tuple(sorted(normalised))


def _listed_arguments(arguments: dict[str, Any] | None) -> tuple:
    """Normalise a binding's arguments as the management API lists them."""
    if not arguments:
        return ()
    normalised = []
    for name, value in arguments.items():
        if isinstance(value, (str, bool, int, float)):
            normalised.append((name, _typed(value)))
        else:
            normalised.append((name, "?" + json.dumps(value, sort_keys=True)))
    return tuple(sorted(normalised))


def _typed(value: Any) -> tuple[str, Any]:
    # keep True and 1 apart (they are equal and hash alike in Python)
    return (type(value).__name__, value)

