"""Flow control on the stub broker: connection.blocked, the write buffer without confirms, and
the source's reading."""
from __future__ import annotations

import pytest

from rtroute.relay import PauseReason

from .rig import Rig


@pytest.mark.parametrize("confirms", [True, False])
def test_connection_blocked_stops_writing_and_unblocked_resumes_in_order(confirms):
    rig = Rig(confirms=confirms, ack_on_write=not confirms)
    first = rig.single()
    rig.turn()
    rig.broker.block()                    # the stub fails the test on any write from here
    waiting = [rig.single() for _ in range(5)]
    rig.ioloop.advance(5.0)
    assert len(rig.broker.published) == 1 and len(rig.relay.queued) == 5
    rig.broker.unblock()
    rig.turn()
    assert [p.body for p in rig.broker.published] == [first.body] + [w.body for w in waiting]
    assert rig.broker.writes == 2         # what waited went out in one write


def test_blocked_state_and_since_reach_on_flow_and_status():
    rig = Rig()
    rig.broker.block("low on disk")
    status = rig.relay.status()
    assert rig.flows == [(True, "low on disk")] and rig.relay.blocked
    assert status["blocked"] and status["blocked_since"] is not None
    assert status["paused"] == ["blocked"]
    rig.broker.unblock()
    assert rig.flows[-1] == (False, None)
    assert rig.relay.status()["blocked"] is False and rig.relay.status()["paused"] == []


def test_a_blocked_callback_of_another_connection_is_ignored():
    rig = Rig()
    old = rig.broker.connection
    rig.relay.detach()
    rig.broker.block()
    assert rig.flows == [] and not rig.relay.blocked
    assert old is rig.broker.connection


def test_a_write_buffer_above_high_pauses_until_below_low_without_confirms():
    rig = Rig(confirms=False, write_buffer=(1000, 100))
    rig.broker.write_buffer(5000)
    rig.single()
    rig.turn()                                       # written; the buffer is now too full
    assert PauseReason.BUFFER in rig.relay.outbox.pause_reasons
    rig.broker.note_buffer_pause()
    waiting = [rig.single() for _ in range(3)]
    rig.ioloop.advance(0.05)                         # polled every 5 ms: still full
    assert len(rig.broker.published) == 1
    rig.broker.write_buffer(500)                     # below high, not yet below low
    rig.ioloop.advance(0.05)
    assert len(rig.broker.published) == 1
    rig.broker.write_buffer(100)
    rig.broker.buffer_drained()
    rig.ioloop.advance(0.005)
    rig.turn()
    assert [p.body for p in rig.broker.published][1:] == [w.body for w in waiting]
    assert not rig.relay.outbox.paused


def test_an_unbounded_source_stops_reading_at_the_limit_and_reads_again_at_half():
    rig = Rig(window=5)
    calls: list[bool] = []
    rig.relay.flow.source(lambda on: calls.append(on) or True, limit=10)
    for _ in range(5 + 10):
        rig.single()
    assert calls == [False] and not rig.relay.flow.reading
    for _ in range(3):
        rig.single()                                 # still arriving (in flight): asked once
    assert calls == [False] and len(rig.relay.queued) == 13
    rig.turn()
    acked = 0
    while len(rig.relay.queued) >= 5:
        acked += 1
        rig.broker.ack(acked)
        rig.turn()
    assert calls == [False, True] and rig.relay.flow.reading
    assert len(rig.relay.queued) == 4


def test_a_source_that_cannot_stop_reading_says_so_once(caplog):
    rig = Rig(window=1)
    rig.relay.flow.source(lambda on: False, limit=3)
    for _ in range(10):
        rig.single()
    assert caplog.text.count("cannot stop reading the source") == 1
    assert rig.relay.flow.reading
