"""The relay's seams and its facade: the outbox knows no wire protocol, users call only the
Relay, per-message hooks are registered, verdicts are an enum, and the facade's room, abandon
and detach on the stub broker."""
from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

import rtroute.relay
from rtroute.relay import Hook, Outgoing, Policy, Settlement, Verdict, VerdictKind
from rtroute.relay.policy import FAILED, OK, Replace, Retry, Settle

from .rig import Rig

RELAY = pathlib.Path(rtroute.relay.__file__).parent
RTROUTE = RELAY.parent

# --- the shape ---------------------------------------------------------------------------------


def test_the_outbox_imports_no_pika_and_nothing_of_the_amqp_layer():
    """It writes to a Sink (relay/seams.py): the AMQP 0-9-1 one is relay/amqp_sink.py."""
    tree = ast.parse((RELAY / "outbox.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not [m for m in imported if m.split(".")[0] == "pika" or m.startswith("rtroute.amqp")]
    assert "rtroute.relay.seams" in imported
    code = ("import sys, rtroute.relay.outbox\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'pika'], 'pika'\n"
            "from rtroute.relay.outbox import header_too_large  # its old home still serves\n"
            "print(header_too_large.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip() == "rtroute.relay.amqp_sink", done.stderr


#: what only the relay may touch: its parts, and the window's counters
REACHING_IN = re.compile(r"\.(outbox|fanin|flow)\b|relay\.upstream\b|"
                         r"window\.(in_flight|window|has_room)\b|"
                         r"\bBulkFanIn\b|\bPublishOutcome\b|\bFanIn\b|\bOutbox\b")


@pytest.mark.parametrize("package", ["publisher", "sidecar", "shovel", "divert"])
def test_users_call_only_the_relay_facade(package):
    found = []
    for path in sorted((RTROUTE / package).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            if code.strip().startswith((":", '"', "'")) or ":class:" in code \
                    or ":meth:" in code or ":mod:" in code:
                continue  # documentation
            if REACHING_IN.search(code):
                found.append(f"{path.relative_to(RTROUTE)}:{number}: {line.strip()}")
    assert found == []


# --- policies ----------------------------------------------------------------------------------


def test_a_per_message_hook_runs_only_when_registered_and_an_unregistered_one_is_an_error():
    with pytest.raises(TypeError, match="acked.*Hook.ACKED"):
        class Forgetful(Policy):  # the class statement is what fails
            def acked(self, out):
                pass

    class Counting(Policy):
        hooks = frozenset({Hook.ACKED, Hook.PUBLISHED})

        def __init__(self) -> None:
            self.acked_outs: list = []
            self.published_outs: list = []

        def acked(self, out):
            self.acked_outs.append(out)

        def published(self, out):
            self.published_outs.append(out)

    rig = Rig(Counting())
    entry = rig.single()
    rig.turn()
    rig.broker.ack(1)
    rig.turn()
    assert rig.policy.published_outs == [entry] and rig.policy.acked_outs == [entry]
    assert Policy.hooks == frozenset()


def test_verdicts_are_an_enum_that_still_compares_as_its_old_strings():
    out = Outgoing("ex", "k")
    assert OK.kind is VerdictKind.OK and OK.kind == "ok"
    assert FAILED.kind is VerdictKind.FAILED
    assert Retry(2.0).kind is VerdictKind.RETRY and Retry(2.0).delay == 2.0
    assert Replace(out).kind is VerdictKind.REPLACE and Replace(out).out is out
    assert Settle(Settlement.HOLD).kind is VerdictKind.SETTLE
    assert Verdict("failed").kind is VerdictKind.FAILED
    assert repr(Retry(1.5)) == "<Verdict retry 1.5>" and repr(OK) == "<Verdict ok>"
    with pytest.raises(ValueError):
        Verdict("maybe")


# --- the facade --------------------------------------------------------------------------------


def test_room_is_the_window_s_free_slots_and_none_while_anything_pauses_or_waits():
    rig = Rig(window=3)
    assert rig.relay.room == 3 and rig.relay.open
    rig.single()
    rig.turn()
    assert rig.relay.room == 2 and rig.relay.in_flight == 1
    rig.single()
    rig.single()
    assert rig.relay.room == 0
    rig.single()                                   # waits: the window is full
    rig.turn()
    rig.broker.ack(3, multiple=True)
    rig.turn()
    assert rig.relay.in_flight == 1 and rig.relay.room == 2
    rig.broker.block()
    assert rig.relay.room == 0
    rig.broker.unblock()
    assert rig.relay.room == 2
    assert rig.relay.published == 4
    rig.broker.drop_connection()
    assert rig.relay.room == 0 and not rig.relay.open


class Unsent(Policy):
    """Fails what never went out (as the publisher does), recording what it was asked."""

    def __init__(self) -> None:
        self.unsent_asked: list = []
        self.failed_reasons: list = []

    def unsent(self, out, reason):
        self.unsent_asked.append((out, reason))
        return True

    def failed(self, out, future):
        self.failed_reasons.append(future.reason)
        return FAILED

    def settlement(self, item):
        return Settlement.LEAVE


def test_detach_asks_the_policy_about_publishes_never_sent():
    rig = Rig(Unsent(), window=1)
    first, second = rig.item(), rig.item()
    rig.relay.submit(first, [rig.out(first)])
    out = rig.out(second)
    rig.relay.submit(second, [out])                # waits: the window is full
    rig.turn()
    assert list(rig.relay.queued) == [out]
    assert rig.relay.detach("connection lost: gone") == []
    assert rig.policy.unsent_asked == [(out, "connection lost: gone")]
    assert rig.policy.failed_reasons == ["connection lost: gone"]
    assert second.failed and second.awaiting == 0


def test_by_default_detach_forgets_what_never_went_out_and_returns_it():
    rig = Rig(window=1)
    first, second = rig.item(), rig.item()
    rig.relay.submit(first, [rig.out(first)])
    out = rig.out(second)
    rig.relay.submit(second, [out])
    rig.turn()
    assert rig.relay.detach() == [out]
    assert not second.failed and second.awaiting == 1  # the broker redelivers it


def test_when_drained_calls_back_once_every_publish_is_answered_and_its_item_acked():
    rig = Rig()
    item = rig.item()
    rig.relay.submit(item, [rig.out(item)])
    rig.turn()
    calls: list[str] = []
    rig.relay.when_drained(lambda: calls.append("drained"), timeout=10)
    rig.ioloop.advance(0.2)
    assert calls == []
    rig.broker.ack(1)
    rig.turn()
    assert rig.settled() == [("ack", item.tag, True)]
    rig.ioloop.advance(0.1)
    assert calls == ["drained"]
    rig.ioloop.advance(20)
    assert calls == ["drained"]                    # once: the timeout does not call again


def test_when_drained_gives_up_at_the_timeout_or_once_the_channel_is_gone():
    rig = Rig()
    item = rig.item()
    rig.relay.submit(item, [rig.out(item)])
    rig.turn()
    calls: list[str] = []
    rig.relay.when_drained(lambda: calls.append("timeout"), timeout=1)
    rig.ioloop.advance(0.9)
    assert calls == []
    rig.ioloop.advance(0.2)
    assert calls == ["timeout"]
    rig.relay.when_drained(lambda: calls.append("gone"), timeout=60)
    rig.broker.drop_connection()                   # the broker redelivers what is unacked
    rig.ioloop.advance(0.1)
    assert calls == ["timeout", "gone"]


# --- a sink of another protocol ------------------------------------------------------------------


class Full(Exception):
    pass


class Gone(Exception):
    pass


class ListSink:
    """A sink of no wire protocol: it keeps what it is given (a Sink by its shape alone)."""

    full = (Full,)
    gone = (Gone,)

    def __init__(self, confirms: bool, room: int = 2) -> None:
        self.confirms = confirms
        self.closing = False
        self.capacity = room
        self.sent: list[tuple[str, bytes]] = []
        self.writes: list[tuple[bytes, int]] = []
        self.callbacks: list = []

    @property
    def in_flight(self) -> int:
        return len(self.callbacks)

    @property
    def room(self) -> int:
        return self.capacity - len(self.callbacks)

    def check(self, out):
        return "too long" if len(out.routing_key) > 10 else None

    def encode(self, out):
        return b"encoded:" + out.body, 1

    def publish_frames(self, exchange, routing_key, data, frame_count, body=None,
                       mandatory=False, callback=None, context=None):
        if self.room <= 0:
            raise Full()
        self.sent.append((routing_key, data))
        self.callbacks.append((callback, context))

    def publish_frames_in_bulk(self, messages, frame_count, contexts):
        raise Gone()

    def write(self, data, frame_count):
        self.writes.append((data, frame_count))


def test_the_outbox_publishes_through_any_sink_with_its_own_errors():
    from rtroute.relay.outbox import Outbox, PauseReason
    from tests.stub_broker import StubIOLoop

    ioloop = StubIOLoop()
    rejected: list = []
    outbox = Outbox(ioloop, on_confirm=lambda future: None,
                    on_rejected=lambda out, reason: rejected.append((out.routing_key, reason)))
    sink = ListSink(confirms=True)
    outbox.attach(sink)
    outs = [Outgoing("ex", key, body=b"x", checked=False)
            for key in ("a", "b", "much-too-long", "c")]
    for out in outs:
        outbox.put(out)
    assert [key for key, _ in sink.sent] == ["a", "b"] and sink.sent[0][1] == b"encoded:x"
    assert rejected == [("much-too-long", "too long")]   # never handed over
    assert PauseReason.WINDOW in outbox.pause_reasons and outbox.room == 0
    assert [out.routing_key for out in outbox.queued] == ["c"]
    sink.callbacks.clear()
    outbox.resume(PauseReason.WINDOW)
    assert [key for key, _ in sink.sent] == ["a", "b", "c"] and outbox.room == 1

    unconfirmed = Outbox(ioloop, on_confirm=lambda future: None,
                         on_rejected=lambda out, reason: None)
    writer = ListSink(confirms=False)
    unconfirmed.attach(writer)
    for key in ("d", "e"):
        unconfirmed.put(Outgoing("ex", key, frames=b"[" + key.encode() + b"]", frame_count=3,
                                 checked=True))
    assert writer.writes == []
    ioloop.run()                                   # one write at the end of the turn
    assert writer.writes == [(b"[d][e]", 6)]


def test_bulk_needs_an_upstream_that_takes_acks_in_bulk():
    from rtroute.relay import BrokerUpstream, FutureUpstream, Relay, Timers
    from tests.stub_broker import StubIOLoop

    timers = Timers(StubIOLoop())
    with pytest.raises(TypeError, match="BulkUpstream"):
        Relay(timers, Policy(), BrokerUpstream(timers), window=10, bulk=True)
    relay = Relay(timers, Policy(), FutureUpstream(lambda items: None), window=10, bulk=True)
    assert relay.on_bulk_settled is not None
    with pytest.raises(RuntimeError, match="without bulk"):
        Relay(timers, Policy(), BrokerUpstream(timers), window=10).put_bulk([], 0, [])
