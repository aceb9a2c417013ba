"""BindingWatcher against the real broker: listing, events, no gap, polling, reconnects."""
from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from rtroute.amqp import Binding, BindingWatcher, ManagementClient, WatcherState, connect_blocking

from ..conftest import broker_ctl, broker_uri_for

pytestmark = pytest.mark.broker


class Recorder:
    """Collects the watcher's callbacks (they run in the ioloop thread)."""

    def __init__(self) -> None:
        self.added: list[Binding] = []
        self.removed: list[Binding] = []
        self.keys_added: list[str] = []
        self.keys_removed: list[str] = []
        self.snapshot_at_ready: frozenset[Binding] | None = None
        self.ready = threading.Event()

    def watcher(self, exchange: str, management: ManagementClient, **kwargs) -> BindingWatcher:
        watcher = BindingWatcher(
            exchange, management, on_add=self.added.append, on_remove=self.removed.append,
            on_key_add=self.keys_added.append, on_key_remove=self.keys_removed.append,
            on_ready=lambda: self._on_ready(watcher), **kwargs,
        )
        return watcher

    def _on_ready(self, watcher: BindingWatcher) -> None:
        self.snapshot_at_ready = watcher.bindings
        self.ready.set()


def watch(ioloop, recorder, exchange, management, **kwargs):
    """Start a watcher the way the sidecar does: (re)started in on_ready of every connection."""
    watcher = recorder.watcher(exchange, management, **kwargs)
    runner = ioloop(on_ready=lambda connection, _channel, _queue: watcher.start(connection))
    assert recorder.ready.wait(10)
    return runner, watcher


def known(runner, watcher):
    return runner.call(lambda: watcher.bindings)


def test_existing_bindings_are_known_at_start(ioloop, channel, names, mgmt):
    exchange, q1, q2, e2 = names.exchange(), names.queue(), names.queue(), names.exchange("e2")
    channel.exchange_declare(exchange, "direct")
    channel.exchange_declare(e2, "fanout")
    for queue in (q1, q2):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind(q1, exchange, "k1")
    channel.queue_bind(q1, exchange, "k2", arguments={"x-tag": "a", "n": 1})
    channel.queue_bind(q2, exchange, "k1")
    channel.exchange_bind(e2, exchange, "k3")
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt)
    expected = {Binding(q1, "queue", "k1"), Binding(q1, "queue", "k2"),
                Binding(q2, "queue", "k1"), Binding(e2, "exchange", "k3")}
    assert recorder.snapshot_at_ready == expected
    assert set(recorder.added) == expected and len(recorder.added) == 4
    assert sorted(recorder.keys_added) == ["k1", "k2", "k3"]
    assert runner.call(lambda: watcher.binding_keys) == {"k1", "k2", "k3"}
    assert watcher.state is WatcherState.FOLLOWING


def test_changes_while_running_reach_the_callbacks(ioloop, channel, names, mgmt, until):
    exchange, q1, q2, e2 = names.exchange(), names.queue(), names.queue(), names.exchange("e2")
    channel.exchange_declare(exchange, "direct")
    channel.exchange_declare(e2, "fanout")
    for queue in (q1, q2):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind(q1, exchange, "k1")
    channel.queue_bind(q2, exchange, "k1")
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt, relist_interval=300)

    channel.queue_bind(q1, exchange, "k2")
    channel.exchange_bind(e2, exchange, "k3")
    until(lambda: {Binding(q1, "queue", "k2"), Binding(e2, "exchange", "k3")}
          <= set(recorder.added))
    assert {"k2", "k3"} <= set(recorder.keys_added)

    channel.queue_unbind(q1, exchange, "k2")
    until(lambda: Binding(q1, "queue", "k2") in recorder.removed)
    until(lambda: "k2" in recorder.keys_removed)

    channel.queue_delete(q2)  # q1 still binds k1: the key stays
    until(lambda: Binding(q2, "queue", "k1") in recorder.removed)
    channel.exchange_delete(e2)
    until(lambda: Binding(e2, "exchange", "k3") in recorder.removed)
    assert known(runner, watcher) == {Binding(q1, "queue", "k1")}
    assert "k1" not in recorder.keys_removed
    assert watcher.listings == 1  # all of it came from events


class ListingThatLingers(ManagementClient):
    """The real client, but a listing returns only after ``during_listing`` ran: changes made
    then are missing from the listing and reach the watcher only as events."""

    def __init__(self, during_listing, **kwargs) -> None:
        super().__init__(**kwargs)
        self.during_listing = during_listing

    def iter_exchange_bindings(self, name, vhost="/", progress=None, export=True):
        rows = list(super().iter_exchange_bindings(name, vhost, progress, export))
        if self.during_listing is not None:
            self.during_listing()
            self.during_listing = None
            time.sleep(0.5)  # let the events of those changes arrive before the listing does
        return rows


def test_no_gap_changes_during_the_first_listing_are_not_lost(ioloop, broker_uri, names, mgmt):
    exchange, q1, q2 = names.exchange(), names.queue(), names.queue()
    setup = connect_blocking(broker_uri)
    channel = setup.channel()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(q1, durable=True)
    channel.queue_declare(q2, durable=True)
    channel.queue_bind(q1, exchange, "before")
    channel.queue_bind(q1, exchange, "gone")

    def change_bindings():
        changer = connect_blocking(broker_uri)
        ch = changer.channel()
        for i in range(20):
            ch.queue_bind(q2, exchange, f"during.{i}")
        ch.queue_unbind(q1, exchange, "gone")
        changer.close()

    recorder = Recorder()
    management = ListingThatLingers(change_bindings, url=mgmt.base_url[:-4], timeout=5)
    watch(ioloop, recorder, exchange, management, relist_interval=300)
    expected = {Binding(q1, "queue", "before")} | {
        Binding(q2, "queue", f"during.{i}") for i in range(20)
    }
    assert recorder.snapshot_at_ready == expected  # at ready: listing + buffered events
    assert Binding(q1, "queue", "gone") not in recorder.added  # no flicker either
    setup.close()


def test_polling_alone_follows_changes(ioloop, channel, names, mgmt, until):
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    recorder = Recorder()
    _runner, watcher = watch(ioloop, recorder, exchange, mgmt, use_events=False,
                             poll_interval=0.2)
    assert watcher.state is WatcherState.POLLING
    channel.queue_bind(queue, exchange, "polled")
    until(lambda: Binding(queue, "queue", "polled") in recorder.added)
    channel.queue_unbind(queue, exchange, "polled")
    until(lambda: Binding(queue, "queue", "polled") in recorder.removed)


def test_without_the_event_exchange_it_falls_back_to_polling(ioloop, broker_uri, mgmt, until):
    vhost = f"rtroute-test-{uuid.uuid4().hex[:8]}"  # no amq.rabbitmq.event in a new vhost
    mgmt.request("PUT", f"vhosts/{vhost}", {})
    try:
        mgmt.request("PUT", f"permissions/{vhost}/guest",
                     {"configure": ".*", "write": ".*", "read": ".*"})
        uri = broker_uri_for(vhost)
        setup = connect_blocking(uri)
        channel = setup.channel()
        channel.exchange_declare("logs.bindings", "direct")
        channel.queue_declare("q", durable=True)
        recorder = Recorder()
        watcher = recorder.watcher("logs.bindings", mgmt, vhost=vhost, poll_interval=0.2)
        ioloop(on_ready=lambda connection, *_: watcher.start(connection), uri=uri)
        assert recorder.ready.wait(10)
        assert watcher.state is WatcherState.POLLING
        channel.queue_bind("q", "logs.bindings", "k")
        until(lambda: Binding("q", "queue", "k") in recorder.added)
        setup.close()
    finally:
        mgmt.request("DELETE", f"vhosts/{vhost}")


def test_arguments_that_do_not_normalise_are_healed_by_a_relist(ioloop, channel, names, mgmt,
                                                                  until, broker_version):
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    nested = {"x-nested": {"n": [1, "z"]}}
    channel.queue_bind(queue, exchange, "k", arguments=nested)
    channel.queue_bind(queue, exchange, "k")  # the same key again, without arguments
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt, relist_interval=300)
    assert recorder.added == [Binding(queue, "queue", "k")]
    channel.queue_unbind(queue, exchange, "k")  # one of the two goes: still bound
    if broker_version < (4, 3):
        # 3.x and 4.0 send its binding.deleted; which of the two entries it removed only a
        # listing can tell (the nested arguments do not normalise alike in events and listings)
        until(lambda: watcher.listings >= 2)
    # 4.3 (Khepri) sends no binding.deleted while another binding with the same source,
    # destination and key remains (measured on 4.3.6): the event comes with the last one
    assert known(runner, watcher) == {Binding(queue, "queue", "k")}
    channel.queue_unbind(queue, exchange, "k", arguments=nested)
    until(lambda: Binding(queue, "queue", "k") in recorder.removed)
    assert known(runner, watcher) == frozenset()


def test_after_a_reconnect_changes_made_meanwhile_are_reported(ioloop, broker_uri, channel,
                                                                names, mgmt, force_close, until):
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, "old")
    recorder = Recorder()
    watcher = recorder.watcher(exchange, mgmt, relist_interval=300)

    def change_while_disconnected(_reason):
        # runs in the ioloop before the reconnect is scheduled: no event can reach the watcher
        assert watcher.state is WatcherState.DETACHED
        changer = connect_blocking(broker_uri)
        ch = changer.channel()
        ch.queue_unbind(queue, exchange, "old")
        ch.queue_bind(queue, exchange, "new")
        changer.close()

    runner = ioloop(on_ready=lambda connection, *_: watcher.start(connection),
                    on_lost=change_while_disconnected)
    assert recorder.ready.wait(10)
    force_close(runner.connection_name)
    runner.wait_ready(2, timeout=15)
    until(lambda: Binding(queue, "queue", "new") in recorder.added)
    until(lambda: Binding(queue, "queue", "old") in recorder.removed)
    assert recorder.added.count(Binding(queue, "queue", "old")) == 1  # no re-announcement
    assert watcher.listings == 2
    assert watcher.state is WatcherState.FOLLOWING


class ListingThatLies(ManagementClient):
    """The real client, but its next ``lies`` listings (after the first) answer "no bindings",
    as the API of another broker, or a broken one, would."""

    def __init__(self, lies: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lies = lies
        self.listed = 0

    def iter_exchange_bindings(self, name, vhost="/", progress=None, export=True):
        rows = list(super().iter_exchange_bindings(name, vhost, progress, export))
        self.listed += 1
        if self.listed > 1 and self.lies:
            self.lies -= 1
            return []
        return rows


def one_binding(channel, names) -> tuple[str, str]:
    """A direct exchange with one queue bound by ``k``: ``(exchange, queue)``."""
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, "k")
    return exchange, queue


def test_one_listing_that_disagrees_with_the_events_empties_nothing(ioloop, channel, names,
                                                                   mgmt, until):
    exchange, queue = one_binding(channel, names)
    recorder = Recorder()
    management = ListingThatLies(1, url=mgmt.base_url[:-4], timeout=5)
    runner, watcher = watch(ioloop, recorder, exchange, management, relist_interval=0.3)
    until(lambda: watcher.listings >= 3)  # the lie, then an honest one
    assert known(runner, watcher) == {Binding(queue, "queue", "k")}
    assert recorder.removed == []
    assert watcher.disagreements == 1
    assert "1 known bindings not listed" in watcher.last_disagreement


def test_a_binding_missing_from_two_listings_in_a_row_is_removed_and_said(ioloop, channel,
                                                                         names, mgmt, until,
                                                                         caplog):
    exchange, queue = one_binding(channel, names)
    recorder = Recorder()
    management = ListingThatLies(2, url=mgmt.base_url[:-4], timeout=5)
    with caplog.at_level("WARNING", logger="rtroute.amqp.binding_watcher"):
        _runner, watcher = watch(ioloop, recorder, exchange, management, relist_interval=0.3)
        until(lambda: Binding(queue, "queue", "k") in recorder.removed)
    assert watcher.disagreements == 2
    assert any("differs from the events" in r.getMessage() for r in caplog.records)


def test_a_listing_of_an_exchange_the_api_does_not_know_changes_nothing(ioloop, channel, names,
                                                                       mgmt, until):
    exchange, queue = one_binding(channel, names)
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt, relist_interval=0.3)

    class Elsewhere(ManagementClient):  # an API where that exchange does not exist
        def exchange(self, name, vhost="/"):
            return super().exchange(name + ".absent", vhost)

    runner.call(lambda: setattr(watcher, "_management", Elsewhere(mgmt.base_url[:-4],
                                                                  timeout=5)))
    until(lambda: watcher.last_error and "does not exist" in watcher.last_error)
    assert known(runner, watcher) == {Binding(queue, "queue", "k")}
    assert recorder.removed == []


class SharedConnection:
    """The one connection that all watchers use (as the proxy catalog's do), keeping each
    channel they open on it."""

    def __init__(self, connection) -> None:
        self._connection = connection
        self.channels = []

    def channel(self, on_open_callback):
        channel = self._connection.channel(on_open_callback=on_open_callback)
        self.channels.append(channel)
        return channel

    def __getattr__(self, name):
        return getattr(self._connection, name)


def start_stop_cycles(runner, exchange, management, until, cycles=20) -> SharedConnection:
    """One watcher per cycle, started and soon stopped on one shared connection, as the proxy
    catalog does when an x-rtopic exchange is declared and deleted. The stop lands at another
    step each time: before the channel opened, during the subscription, during or after the
    first listing; every fifth watcher is started a second time before it is stopped."""
    shared = runner.call(lambda: SharedConnection(runner.connection))

    def cycle(i: int) -> None:
        watcher = BindingWatcher(exchange, management, relist_interval=300)
        watcher.start(shared)
        if i % 5 == 0:
            watcher.stop()
            return
        if i % 5 == 4:
            watcher.start(shared)
        shared.ioloop.call_later(0.002 * i, watcher.stop)

    for i in range(cycles):
        runner.call(lambda i=i: cycle(i))
    until(lambda: runner.call(lambda: all(channel.is_closed for channel in shared.channels)))
    assert len(shared.channels) == cycles + cycles // 5
    return shared


def test_quick_start_stop_cycles_on_a_shared_connection_keep_it_open(ioloop, channel, names,
                                                                    mgmt, until):
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "topic")
    channel.queue_declare(queue, durable=True)
    runner = ioloop()
    shared = start_stop_cycles(runner, exchange, mgmt, until)
    assert runner.call(lambda: runner.connection.is_open)
    assert runner.losses == [] and len(runner.readies) == 1

    recorder = Recorder()
    watcher = recorder.watcher(exchange, mgmt, relist_interval=300)
    runner.call(lambda: watcher.start(shared))
    assert recorder.ready.wait(10)
    channel.queue_bind(queue, exchange, "after.the.cycles")
    until(lambda: Binding(queue, "queue", "after.the.cycles") in recorder.added)
    assert runner.losses == [] and len(runner.readies) == 1


def queues_owned_by(connection_name: str) -> list[str]:
    """The queues of the connection whose client named it ``connection_name`` (an exclusive
    queue is its connection's; rabbitmqctl tells which, without the statistics' lag)."""
    connections = json.loads(broker_ctl("list_connections", "pid", "client_properties",
                                        "--formatter", "json").stdout)
    named = ["connection_name", "longstr", connection_name]
    pids = [row["pid"] for row in connections
            if isinstance(row["client_properties"], list) and named in row["client_properties"]]
    assert len(pids) == 1, connections
    queues = json.loads(broker_ctl("list_queues", "name", "owner_pid", "--formatter",
                                   "json").stdout)
    return [row["name"] for row in queues if row["owner_pid"] == pids[0]]


def test_quick_start_stop_cycles_leave_no_event_queue_behind(ioloop, channel, names, mgmt,
                                                             until):
    exchange = names.exchange()
    channel.exchange_declare(exchange, "topic")
    runner = ioloop()
    shared = start_stop_cycles(runner, exchange, mgmt, until)
    assert queues_owned_by(runner.connection_name) == []
    recorder = Recorder()
    watcher = recorder.watcher(exchange, mgmt, relist_interval=300)
    runner.call(lambda: watcher.start(shared))
    assert recorder.ready.wait(10)
    assert len(queues_owned_by(runner.connection_name)) == 1  # the one watcher still running
    assert runner.losses == []


def test_a_cancelled_event_consumer_is_replaced_and_what_was_missed_is_listed(
        ioloop, channel, names, mgmt, until):
    # before: nothing resubscribed; changes waited for the next fallback relist
    exchange, q1, q2 = names.exchange(), names.queue(), names.queue()
    channel.exchange_declare(exchange, "direct")
    for queue in (q1, q2):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind(q1, exchange, "k1")
    events_before = {b.destination for b in mgmt.exchange_bindings("amq.rabbitmq.event", "/")}
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt, relist_interval=300,
                            retry_delay=0.2)
    ours = {b.destination for b in mgmt.exchange_bindings("amq.rabbitmq.event", "/")} \
        - events_before
    assert len(ours) == 1, ours
    broker_ctl("delete_queue", ours.pop())  # the broker cancels its consumer
    channel.queue_bind(q2, exchange, "k2")  # made while no consumer listens
    until(lambda: Binding(q2, "queue", "k2") in known(runner, watcher), timeout=10)
    channel.queue_bind(q1, exchange, "k3")  # and events flow again
    until(lambda: Binding(q1, "queue", "k3") in recorder.added, timeout=10)
    assert watcher.listings >= 2


def test_a_first_listing_goes_whole_to_on_table_and_later_changes_to_on_add(
        ioloop, channel, names, mgmt, until):
    """on_table (the proxy's bulk path): the first listing's bindings in one call, on_add not
    called for them; what changes after it, and a re-listing into a known table, come one by
    one through on_add/on_remove as before."""
    exchange, q1, q2 = names.exchange(), names.queue(), names.queue()
    channel.exchange_declare(exchange, "direct")
    for queue in (q1, q2):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind(q1, exchange, "k1")
    channel.queue_bind(q2, exchange, "k2")
    tables: list[list[Binding]] = []
    recorder = Recorder()
    runner, watcher = watch(ioloop, recorder, exchange, mgmt,
                            on_table=lambda bindings: tables.append(list(bindings)))
    assert [set(t) for t in tables] == [{Binding(q1, "queue", "k1"), Binding(q2, "queue", "k2")}]
    assert len(tables[0]) == 2 and recorder.added == []
    # the key listeners still hear every key (their counts are kept)
    assert sorted(recorder.keys_added) == ["k1", "k2"]
    channel.queue_bind(q2, exchange, "k3")
    until(lambda: recorder.added == [Binding(q2, "queue", "k3")])
    channel.queue_unbind(q1, exchange, "k1")
    until(lambda: recorder.removed == [Binding(q1, "queue", "k1")])
    runner.call(watcher.relist_soon)
    until(lambda: watcher.listings >= 2)
    assert len(tables) == 1  # a re-listing into a known table is told binding by binding
    assert known(runner, watcher) == {Binding(q2, "queue", "k2"), Binding(q2, "queue", "k3")}
