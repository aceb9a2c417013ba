"""ConfirmWindow: the confirm rules on frames we play (unit) and against the real broker."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pika
import pika.exceptions
import pytest

from rtroute.amqp import ConfirmWindow, Outcome, WindowClosed, WindowFull

# -- unit: the bookkeeping, with frames played by the test ------------------------------------


class FramePlayer:
    """A stand-in channel: records publishes and lets the test deliver the broker's frames."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str, bytes, bool]] = []
        self._on_close = []
        self._on_return = []
        self._on_ack_nack = None
        self.open = True

    # the part of pika's Channel the window uses
    def add_on_close_callback(self, callback):
        self._on_close.append(callback)

    def add_on_return_callback(self, callback):
        self._on_return.append(callback)

    def confirm_delivery(self, ack_nack_callback, callback=None):
        self._on_ack_nack = ack_nack_callback
        if callback:
            callback(SimpleNamespace(method=pika.spec.Confirm.SelectOk()))

    def basic_publish(self, exchange, routing_key, body, properties=None, mandatory=False):
        if not self.open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.published.append((exchange, routing_key, body, mandatory))

    # the broker's side
    def ack(self, tag, multiple=False):
        self._on_ack_nack(SimpleNamespace(method=pika.spec.Basic.Ack(tag, multiple)))

    def nack(self, tag, multiple=False):
        self._on_ack_nack(SimpleNamespace(method=pika.spec.Basic.Nack(tag, multiple)))

    def give_back(self, exchange, routing_key, body, code=312, text="NO_ROUTE"):
        method = pika.spec.Basic.Return(code, text, exchange, routing_key)
        for callback in self._on_return:
            callback(self, method, pika.BasicProperties(), body)

    def close(self, reason):
        self.open = False
        for callback in self._on_close:
            callback(self, reason)


def started(window_size=10, **kwargs):
    player = FramePlayer()
    window = ConfirmWindow(player, window=window_size, **kwargs)
    window.start()
    return player, window


def publish_n(window, n, mandatory=False, key="k"):
    return [window.publish("ex", f"{key}{i}", f"body{i}", mandatory=mandatory) for i in range(n)]


def outcomes(futures):
    return [f.outcome for f in futures]


def test_delivery_tags_count_from_one_after_confirm_select():
    _player, window = started()
    assert [f.delivery_tag for f in publish_n(window, 3)] == [1, 2, 3]


def test_multiple_ack_settles_everything_up_to_its_tag():
    player, window = started()
    futures = publish_n(window, 5)
    player.ack(3, multiple=True)
    assert outcomes(futures) == [Outcome.ACKED] * 3 + [None] * 2
    assert window.in_flight == 2


def test_single_acks_out_of_order_then_multiple_ack_settles_only_the_rest():
    player, window = started()
    futures = publish_n(window, 5)
    player.ack(2)
    player.ack(4)
    player.nack(5, multiple=True)
    assert outcomes(futures) == [
        Outcome.NACKED, Outcome.ACKED, Outcome.NACKED, Outcome.ACKED, Outcome.NACKED,
    ]
    assert (window.acked, window.nacked, window.in_flight) == (2, 3, 0)


def test_a_message_is_never_both_acked_and_nacked():
    player, window = started()
    seen = []
    futures = [window.publish("ex", "k", b"b", callback=seen.append) for _ in range(3)]
    player.ack(2, multiple=True)
    player.nack(2)
    player.nack(3, multiple=True)
    assert outcomes(futures) == [Outcome.ACKED, Outcome.ACKED, Outcome.NACKED]
    assert seen == futures  # one callback per publish


def test_multiple_with_tag_zero_settles_all_outstanding():
    player, window = started()
    futures = publish_n(window, 4)
    player.ack(0, multiple=True)
    assert outcomes(futures) == [Outcome.ACKED] * 4


def test_return_before_ack_reports_returned_with_reply():
    player, window = started()
    routed, unroutable, later = publish_n(window, 3, mandatory=True)
    player.give_back("ex", "k1", b"body1")
    player.ack(3, multiple=True)
    assert outcomes([routed, unroutable, later]) == [Outcome.ACKED, Outcome.RETURNED,
                                                     Outcome.ACKED]
    assert (unroutable.reply_code, unroutable.reply_text) == (312, "NO_ROUTE")
    assert (window.acked, window.returned) == (2, 1)


def test_returns_of_identical_messages_go_to_successive_publishes():
    player, window = started()
    futures = [window.publish("ex", "same", b"same", mandatory=True) for _ in range(3)]
    player.give_back("ex", "same", b"same")
    player.give_back("ex", "same", b"same")
    player.ack(3, multiple=True)
    assert outcomes(futures) == [Outcome.RETURNED, Outcome.RETURNED, Outcome.ACKED]


def test_a_return_matching_no_publish_is_counted_not_misassigned():
    player, window = started()
    future = window.publish("ex", "k", b"b", mandatory=True)
    player.give_back("ex", "other", b"b")
    player.ack(1)
    assert future.outcome is Outcome.ACKED
    assert window.unmatched_returns == 1


def test_nack_after_return_is_nacked():
    player, window = started()
    future = window.publish("ex", "k", b"b", mandatory=True)
    player.give_back("ex", "k", b"b")
    player.nack(1)
    assert future.outcome is Outcome.NACKED


def test_close_fails_every_unsettled_publish_and_refuses_more():
    closed = []
    player, window = started(on_closed=closed.append)
    futures = publish_n(window, 4)
    player.ack(1)
    player.close(pika.exceptions.ChannelClosedByBroker(404, "NOT_FOUND"))
    assert outcomes(futures) == [Outcome.ACKED] + [Outcome.FAILED] * 3
    assert "NOT_FOUND" in futures[1].reason
    assert closed and window.closed and window.in_flight == 0
    with pytest.raises(WindowClosed):
        window.publish("ex", "k", b"b")


def test_full_window_raises_and_on_writable_fires_at_the_low_watermark():
    writable = []
    player, window = started(4, on_writable=lambda: writable.append(window.in_flight),
                             low_watermark=1)
    publish_n(window, 4)
    assert not window.has_room
    with pytest.raises(WindowFull):
        window.publish("ex", "k", b"b")
    player.ack(2, multiple=True)
    assert writable == []  # 2 in flight, above the low watermark
    player.ack(3)
    assert writable == [1]


def test_failed_publish_call_does_not_use_up_a_sequence_number():
    player, window = started()
    player.open = False  # pika refuses the publish before its close callbacks have run
    with pytest.raises(pika.exceptions.ChannelWrongStateError):
        window.publish("ex", "k", b"refused")
    player.open = True
    assert window.publish("ex", "k", b"ok").delivery_tag == 1
    assert window.in_flight == 1


def test_when_drained_runs_once_nothing_is_in_flight():
    player, window = started()
    publish_n(window, 2)
    drained = []
    window.when_drained(lambda: drained.append(True))
    player.ack(1)
    assert drained == []
    player.ack(2)
    assert drained == [True]


def test_callback_exception_does_not_break_the_window(caplog):
    player, window = started()

    def explode(_future):
        raise RuntimeError("boom")

    first = window.publish("ex", "k", b"b", callback=explode)
    second = window.publish("ex", "k", b"b")
    player.ack(2, multiple=True)
    assert (first.outcome, second.outcome) == (Outcome.ACKED, Outcome.ACKED)
    assert "publish callback failed" in caplog.text


def test_future_latency_and_context():
    player, window = started()
    future = window.publish("ex", "k", b"b", context=("ingress", 7))
    assert future.latency is None and not future.done()
    player.ack(1)
    assert future.done() and future.latency >= 0
    assert future.context == ("ingress", 7)
    assert future.result(timeout=0) is Outcome.ACKED


def test_result_waits_across_threads():
    player, window = started()
    future = window.publish("ex", "k", b"b")
    timer = threading.Timer(0.05, lambda: player.ack(1))
    timer.start()
    assert future.result(timeout=5) is Outcome.ACKED
    with pytest.raises(TimeoutError):
        window.publish("ex", "k", b"b").result(timeout=0.01)


class FrameWritingPlayer(FramePlayer):
    """A FramePlayer whose connection takes ready-made frames (``publish_frames``)."""

    def __init__(self) -> None:
        super().__init__()
        self.soon: list = []
        self.channel_number = 1
        self.is_open = True
        self.connection = SimpleNamespace(is_closing=False, is_closed=False,
                                          ioloop=SimpleNamespace(call_later=self._later))

    def _later(self, _delay, callback):
        self.soon.append(callback)


def test_ready_made_frames_as_a_list_with_a_lazy_body_are_matched_by_returns():
    player = FrameWritingPlayer()
    window = ConfirmWindow(player, window=10)
    window.start()
    made = []

    def body_of(body):
        def make():
            made.append(body)
            return body
        return make

    futures = [window.publish_frames("ex", "k", [b"method", b"header", b"body"], 3,
                                     body=body_of(b"b%d" % i), mandatory=True)
               for i in range(3)]
    assert window.in_flight == 3 and made == []  # the body is made only for a return
    player.give_back("ex", "k", b"b1")
    player.ack(3, multiple=True)
    assert outcomes(futures) == [Outcome.ACKED, Outcome.RETURNED, Outcome.ACKED]
    assert made == [b"b0", b"b1"]


def bulk_window(window_size=10):
    """A window on a FrameWritingPlayer whose bulk outcomes are recorded as
    ``(contexts, outcome, reason)``."""
    player = FrameWritingPlayer()
    settled = []
    window = ConfirmWindow(player, window=window_size,
                           on_bulk_settled=lambda *outcome: settled.append(outcome))
    window.start()
    return player, window, settled


def test_bulk_publishes_are_settled_together_in_publish_order():
    player, window, settled = bulk_window()
    window.publish_frames_in_bulk([b"m1", b"m2", b"m3"], 9, ["a", "b", "c"])
    window.publish_frames_in_bulk([b"m4"], 3, ["d"])
    assert window.in_flight == 4 and window._frames == [b"m1", b"m2", b"m3", b"m4"]
    player.ack(2, multiple=True)
    player.nack(3)
    player.ack(4)
    assert settled == [(["a", "b"], Outcome.ACKED, None), (["c"], Outcome.NACKED, None),
                       (["d"], Outcome.ACKED, None)]
    assert (window.acked, window.nacked, window.in_flight) == (3, 1, 0)


def test_bulk_and_tracked_publishes_share_one_sequence():
    player, window, settled = bulk_window()
    window.publish_frames_in_bulk([b"m1"], 3, ["a"])
    tracked = window.publish_frames("ex", "k", b"m2", 3)
    window.publish_frames_in_bulk([b"m3"], 3, ["c"])
    assert tracked.delivery_tag == 2
    player.ack(3, multiple=True)
    assert tracked.outcome is Outcome.ACKED
    assert settled == [(["a", "c"], Outcome.ACKED, None)]


def test_close_fails_unsettled_bulk_publishes_with_the_reason():
    player, window, settled = bulk_window()
    window.publish_frames_in_bulk([b"m1", b"m2", b"m3"], 9, ["a", "b", "c"])
    player.ack(1)
    player.close("CHANNEL_ERROR - gone")
    assert settled[-1] == (["b", "c"], Outcome.FAILED, "CHANNEL_ERROR - gone")
    with pytest.raises(WindowClosed):
        window.publish_frames_in_bulk([b"m4"], 3, ["d"])


def test_bulk_publishes_beyond_the_window_are_refused_whole():
    _player, window, _settled = bulk_window(window_size=3)
    window.publish_frames_in_bulk([b"m1", b"m2"], 6, ["a", "b"])
    with pytest.raises(WindowFull):
        window.publish_frames_in_bulk([b"m3", b"m4"], 6, ["c", "d"])
    assert window.in_flight == 2 and window._frames == [b"m1", b"m2"]
    window.publish_frames_in_bulk([b"m3"], 3, ["c"])
    assert not window.has_room


def test_bulk_publishing_needs_on_bulk_settled():
    window = ConfirmWindow(FrameWritingPlayer(), window=10)
    window.start()
    with pytest.raises(RuntimeError, match="on_bulk_settled"):
        window.publish_frames_in_bulk([b"m1"], 3, ["a"])


def test_a_failing_on_bulk_settled_does_not_break_the_window(caplog):
    player = FrameWritingPlayer()
    window = ConfirmWindow(player, window=10, on_bulk_settled=lambda *_: 1 / 0)
    window.start()
    window.publish_frames_in_bulk([b"m1", b"m2"], 6, ["a", "b"])
    player.ack(2, multiple=True)
    assert window.in_flight == 0 and window.acked == 2
    assert "on_bulk_settled failed" in caplog.text


# -- against the broker -----------------------------------------------------------------------


class CountingWindow(ConfirmWindow):
    """Counts the confirm frames that acked several publishes at once."""

    multiple_frames = 0

    def _on_ack_nack(self, frame):
        if frame.method.multiple:
            self.multiple_frames += 1
        super()._on_ack_nack(frame)


def open_window(runner, size, **kwargs):
    """A window on the runner's channel, started in the ioloop; returns (window, pump)."""
    state = {"futures": [], "jobs": []}
    ready = threading.Event()

    def pump():
        futures = state["futures"]
        while state["jobs"] and window.has_room:
            exchange, key, body, properties, mandatory = state["jobs"].pop(0)
            futures.append(window.publish(exchange, key, body, properties, mandatory))

    def make():
        nonlocal window
        window = CountingWindow(runner.channel, window=size, on_writable=pump, **kwargs)
        window.start(on_ready=ready.set)

    window = None
    runner.call(make)
    assert ready.wait(5)

    def submit(jobs):
        def go():
            state["jobs"].extend(jobs)
            pump()

        runner.call(go)
        return state["futures"]

    return window, submit


PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.mark.broker
def test_every_publish_is_acked_with_many_in_flight(ioloop, names, depth):
    queue = names.queue()
    runner = ioloop(declarations=[{"method": "queue.declare", "queue": queue, "durable": True}])
    window, submit = open_window(runner, 500)
    count = 5000
    futures = submit([("", queue, b"m" * 100, PERSISTENT, False)] * count)
    assert window.wait_for_confirms(timeout=30)
    assert len(futures) == count
    assert {f.outcome for f in futures} == {Outcome.ACKED}
    assert [f.delivery_tag for f in futures] == list(range(1, count + 1))
    assert window.multiple_frames > 0  # the broker did use multiple acks
    assert window.acked == count and window.in_flight == 0
    assert depth(queue) == count


@pytest.mark.broker
def test_blocking_channel_waits_for_room_and_settles_everything(channel, names, depth):
    queue = names.queue()
    channel.queue_declare(queue, durable=True)
    window = ConfirmWindow(channel, window=50)
    window.start()
    futures = [window.publish("", queue, f"m{i}") for i in range(400)]
    assert window.in_flight <= 50
    assert futures[-1].result(timeout=10) is Outcome.ACKED
    assert window.wait_for_confirms(timeout=10)
    assert {f.outcome for f in futures} == {Outcome.ACKED}
    assert depth(queue) == 400


@pytest.mark.broker
def test_unroutable_mandatory_publish_is_returned_not_acked(channel, names, depth):
    exchange, queue = names.exchange(), names.queue()
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, "good")
    window = ConfirmWindow(channel, window=100)
    window.start()
    keys = ["good", "bad", "good", "bad", "bad", "good"] * 20
    futures = [window.publish(exchange, key, b"same body", mandatory=True) for key in keys]
    assert window.wait_for_confirms(timeout=10)
    for key, future in zip(keys, futures):
        if key == "good":
            assert future.outcome is Outcome.ACKED
        else:
            assert future.outcome is Outcome.RETURNED
            assert (future.reply_code, future.reply_text) == (312, "NO_ROUTE")
    assert (window.acked, window.returned, window.unmatched_returns) == (60, 60, 0)
    assert depth(queue) == 60


@pytest.mark.broker
def test_unroutable_publish_without_mandatory_is_simply_acked(channel, names):
    exchange = names.exchange()
    channel.exchange_declare(exchange, "direct")
    window = ConfirmWindow(channel)
    window.start()
    assert window.publish(exchange, "nowhere", b"x").result(timeout=5) is Outcome.ACKED


@pytest.mark.broker
def test_full_queue_with_reject_publish_nacks(channel, names, depth):
    queue = names.queue()
    channel.queue_declare(queue, durable=True,
                          arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    window = ConfirmWindow(channel, window=10)
    window.start()
    futures = [window.publish("", queue, f"m{i}") for i in range(5)]
    assert window.wait_for_confirms(timeout=10)
    assert outcomes(futures) == [Outcome.ACKED] + [Outcome.NACKED] * 4
    assert (window.acked, window.nacked) == (1, 4)
    assert depth(queue) == 1


@pytest.mark.broker
def test_channel_closed_by_broker_fails_every_unconfirmed_publish(ioloop, names):
    # Whether persistent publishes are still unconfirmed when the 404 closes the channel is the
    # broker's timing (a quick fsync confirms all 3,000 first, seen once on 4.0.5). The
    # accounting is checked on every attempt; the case that matters (more than the bad publish
    # failed) must come up within a few attempts, or the test fails.
    for attempt in range(4):
        failed = _close_the_channel_under_3000_persistent_publishes(ioloop, names)
        if len(failed) > 1:  # persistent publishes were still waiting for their confirms
            return
    pytest.fail(f"every persistent publish was confirmed before the channel closed, "
                f"{attempt + 1} times")


def _close_the_channel_under_3000_persistent_publishes(ioloop, names) -> list:
    queue = names.queue()
    runner = ioloop(declarations=[{"method": "queue.declare", "queue": queue, "durable": True}])
    closed = threading.Event()
    window, submit = open_window(runner, 5000, on_closed=lambda _reason: closed.set())
    jobs = [("", queue, b"m" * 4096, PERSISTENT, False)] * 3000
    jobs.append((names.exchange("missing"), "k", b"x", None, False))  # 404 closes the channel
    futures = submit(jobs)
    assert closed.wait(10)
    assert all(f.done() for f in futures)
    failed = [f for f in futures if f.outcome is Outcome.FAILED]
    assert window.acked + len(failed) == len(futures) == 3001
    assert futures[-1].outcome is Outcome.FAILED
    assert all("NOT_FOUND" in f.reason for f in failed)
    assert all(f.outcome is Outcome.ACKED for f in futures if f not in failed)
    assert window.in_flight == 0
    with pytest.raises(WindowClosed):
        runner.call(lambda: window.publish("", queue, b"late"))
    return failed


@pytest.mark.broker
def test_blocking_publish_that_closes_the_channel_is_failed_not_raised(channel, names):
    window = ConfirmWindow(channel)
    window.start()
    future = window.publish(names.exchange("missing"), "k", b"x")
    # the close may arrive after the publish call returned; result() waits for it
    assert future.result(timeout=5) is Outcome.FAILED
    assert future.outcome is Outcome.FAILED
    assert "NOT_FOUND" in window.close_reason
    with pytest.raises(WindowClosed):
        window.publish("", "q", b"x")


@pytest.mark.broker
def test_ready_made_frames_and_pika_publishes_share_one_sequence_in_order(ioloop, names,
                                                                           broker_uri):
    from rtroute.amqp import frames

    queue = names.queue()
    runner = ioloop(declarations=[{"method": "queue.declare", "queue": queue, "durable": True}])
    settled: list = []
    state: dict = {}

    def make() -> None:
        reader = frames.install(runner.connection)
        window = ConfirmWindow(runner.channel, window=100)
        window.read_confirms_from(reader)
        state["window"] = window
        window.start()

    runner.call(make)
    window = state["window"]

    def raw(key: str, body: bytes) -> bytes:
        number = runner.channel.channel_number
        return b"".join((
            frames.publish_frame(number, frames.shortstr(""), frames.shortstr(key), True),
            pika.frame.Header(number, len(body), pika.BasicProperties()).marshal(),
            pika.frame.Body(number, body).marshal()))

    def publish_all() -> None:
        for i in range(30):
            body = f"m{i}".encode()
            if i % 3 == 0:  # pika encodes this one: the buffered frames must go out first
                window.publish("", queue, body, mandatory=True, callback=settled.append)
            elif i == 7:  # no such queue: returned, then acked
                window.publish_frames("", "rtroute.no-such-queue", raw("rtroute.no-such-queue",
                                      body), 3, body, mandatory=True, callback=settled.append)
            else:
                window.publish_frames("", queue, raw(queue, body), 3, body, mandatory=True,
                                      callback=settled.append)

    runner.call(publish_all)
    assert window.wait_for_confirms(timeout=10)
    assert sorted(f.delivery_tag for f in settled) == list(range(1, 31))
    assert {f.delivery_tag: f.outcome for f in settled if f.outcome is not Outcome.ACKED} == \
        {8: Outcome.RETURNED}
    with pika.BlockingConnection(pika.URLParameters(broker_uri)) as check:
        got = []
        ch = check.channel()
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            got.append(body)
    assert got == [f"m{i}".encode() for i in range(30) if i != 7]
