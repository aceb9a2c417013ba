"""Binding watchers sharing one EventFeed, with the broker played (see
test_binding_watcher_races.py): one channel and one event queue for any number of watchers,
each event handed to the watchers it is about, and a lost subscription reported to each watcher
as a gap until its next listing."""
from __future__ import annotations

import pika.exceptions

from rtroute.amqp import BindingWatcher, WatcherState
from rtroute.amqp.event_feed import EventFeed

from .test_binding_watcher_races import NoBindings, PlayedConnection, event, subscribe


def _watchers(names: list[str], current: list) -> tuple[EventFeed, list[BindingWatcher],
                                                         PlayedConnection]:
    feed = EventFeed("test")
    connection = PlayedConnection()
    feed.start(connection)
    watchers = [BindingWatcher(name, NoBindings(), feed=feed, relist_interval=60.0,
                               on_current=lambda ok, name=name: current.append((name, ok)))
                for name in names]
    for watcher in watchers:
        watcher.start(connection)
    return feed, watchers, connection


def _list_all(connection: PlayedConnection, count: int) -> None:
    for _ in range(count):
        connection.ioloop.run_one_callback()


def test_watchers_share_one_channel_and_get_only_their_exchanges_events():
    current: list = []
    feed, (a, b), connection = _watchers(["a.bindings", "b.bindings"], current)
    assert len(connection.channels) == 1
    subscribe(connection.channels[0])
    _list_all(connection, 2)
    assert a.state is b.state is WatcherState.FOLLOWING
    consume = connection.channels[0].consumers[0]
    consume(connection.channels[0], *event("binding.created", source_name="a.bindings",
                                           destination_name="q", destination_kind="queue",
                                           routing_key="k"))
    assert [x.destination for x in a.bindings] == ["q"] and not b.bindings
    consume(connection.channels[0], *event("queue.deleted", name="q"))
    assert not a.bindings
    assert feed.events_received == 2
    assert sorted(current) == [("a.bindings", True), ("b.bindings", True)]


def test_a_lost_subscription_is_a_gap_for_every_watcher_until_it_listed_again():
    current: list = []
    _feed, watchers, connection = _watchers(["a.bindings", "b.bindings"], current)
    subscribe(connection.channels[0])
    _list_all(connection, 2)
    current.clear()
    connection.channels[0].closed(pika.exceptions.ChannelClosedByBroker(404, "NOT_FOUND"))
    assert sorted(current) == [("a.bindings", False), ("b.bindings", False)]
    assert all(w.state is WatcherState.STARTING for w in watchers)
    connection.ioloop.fire_timers()  # the feed subscribes again
    assert len(connection.channels) == 2
    subscribe(connection.channels[1])
    _list_all(connection, 2)
    assert sorted(current[-2:]) == [("a.bindings", True), ("b.bindings", True)]
    assert all(w.state is WatcherState.FOLLOWING for w in watchers)


def test_a_watcher_that_joins_a_subscribed_feed_lists_at_once_and_stop_detaches_it():
    current: list = []
    feed, (a,), connection = _watchers(["a.bindings"], current)
    subscribe(connection.channels[0])
    _list_all(connection, 1)
    late = BindingWatcher("c.bindings", NoBindings(), feed=feed, relist_interval=60.0)
    late.start(connection)
    _list_all(connection, 1)
    assert late.state is WatcherState.FOLLOWING and len(connection.channels) == 1
    late.stop()
    a.stop()
    assert feed.watchers == 0


def test_an_unavailable_feed_makes_its_watchers_poll_until_it_subscribes_again():
    """The feed's connection to the event vhost is down (no permission there, the node
    away): its watchers poll; once it subscribes again they follow the events, and a poll
    listed before the subscription counts for nothing (a change between its reading and the
    subscription would be missed)."""
    current: list = []
    states: list = []
    feed, (a,), connection = _watchers(["a.bindings"], current)
    feed.on_state = lambda: states.append((feed.subscribed, feed.absent_reason))
    feed.unavailable("connection to vhost '/': ACCESS_REFUSED")
    assert states == [(False, "connection to vhost '/': ACCESS_REFUSED")]
    _list_all(connection, 1)
    assert a.state is WatcherState.POLLING and current == [("a.bindings", True)]
    a.relist_soon(0)
    connection.ioloop.fire_timers()  # a poll's listing is asked...
    feed.start(connection)  # ...and the feed is back meanwhile
    subscribe(connection.channels[-1])
    assert states[-1] == (True, None) and not feed.absent
    _list_all(connection, 2)  # the poll's answer, then the listing after the subscription
    assert a.state is WatcherState.FOLLOWING and a.listings == 2  # the first poll's, this one
