"""Settler: acks in delivery-tag order, one multiple ack per ioloop turn, on frames we play."""
from __future__ import annotations

import pika.exceptions
import pytest

from rtroute.amqp import Delivery, Settler


class ConsumeChannel:
    """A stand-in consume channel: records the acks and nacks the settler sends."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []
        self.is_open = True
        self.refuse = False

    def basic_ack(self, tag, multiple=False):
        if self.refuse:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.sent.append(("ack", tag, multiple))

    def basic_nack(self, tag, multiple=False, requeue=True):
        if self.refuse:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.sent.append(("nack", tag, requeue))

    def basic_reject(self, tag, requeue=True):
        if self.refuse:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.sent.append(("reject", tag, requeue))


class IOLoopTurns:
    """A stand-in ioloop: ``call_later(0, ...)`` callbacks run when the test ends the turn."""

    def __init__(self) -> None:
        self.soon: list = []

    def call_later(self, _delay, callback):
        self.soon.append(callback)

    def end_turn(self):
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


def settler_with(n=0, **kwargs):
    channel, ioloop = ConsumeChannel(), IOLoopTurns()
    settler = Settler(ioloop, channel, **kwargs)
    deliveries = [Delivery(tag) for tag in range(1, n + 1)]
    for delivery in deliveries:
        settler.track(delivery)
    return channel, ioloop, settler, deliveries


def test_acks_of_one_turn_go_out_as_one_multiple_ack():
    channel, ioloop, settler, ds = settler_with(5)
    for d in ds:
        settler.ack(d)
    assert channel.sent == []  # not before the end of the turn
    ioloop.end_turn()
    assert channel.sent == [("ack", 5, True)]
    assert len(settler) == 0


def test_an_unsettled_delivery_holds_back_the_acks_above_it():
    channel, ioloop, settler, ds = settler_with(4)
    for d in (ds[0], ds[2], ds[3]):
        settler.ack(d)
    ioloop.end_turn()
    assert channel.sent == [("ack", 1, True)]  # 3 and 4 wait for 2
    settler.ack(ds[1])
    ioloop.end_turn()
    assert channel.sent == [("ack", 1, True), ("ack", 4, True)]


def test_a_failed_delivery_is_rejected_at_once_and_frees_the_acks_behind_it():
    # by basic.reject: from RabbitMQ 4.3 on, only a reject counts towards a quorum queue's
    # delivery limit (a nack with requeue does not), so a message whose publish keeps failing
    # is dead-lettered there instead of coming back for ever
    channel, ioloop, settler, ds = settler_with(3)
    settler.ack(ds[1])
    settler.ack(ds[2])
    ioloop.end_turn()
    assert channel.sent == []
    assert settler.nack(ds[0], requeue=True, failed=True)
    assert channel.sent == [("reject", 1, True)]
    ioloop.end_turn()
    assert channel.sent == [("reject", 1, True), ("ack", 3, True)]


def test_acks_above_a_parked_delivery_go_out_one_by_one():
    channel, ioloop, settler, ds = settler_with(4)
    settler.park(ds[1])
    for d in (ds[0], ds[3], ds[2]):
        settler.ack(d)
    ioloop.end_turn()
    assert channel.sent == [("ack", 1, True), ("ack", 4, False), ("ack", 3, False)]
    assert settler.idle and settler.outstanding == 1
    assert settler.nack(ds[1], requeue=True)
    ioloop.end_turn()
    assert channel.sent[-1] == ("nack", 2, True)
    assert len(settler) == 0 and settler.idle


def test_an_unparked_delivery_holds_back_the_acks_again():
    channel, ioloop, settler, ds = settler_with(3)
    settler.park(ds[0])
    settler.unpark(ds[0])
    settler.ack(ds[1])
    ioloop.end_turn()
    assert channel.sent == []
    assert settler.outstanding == 3


def test_nothing_is_sent_once_the_channel_is_gone_and_reset_forgets_everything():
    channel, ioloop, settler, ds = settler_with(2)
    settler.ack(ds[1])
    channel.is_open = False
    assert settler.nack(ds[0], requeue=True) is False  # the broker redelivers it
    ioloop.end_turn()
    assert channel.sent == []
    fresh = ConsumeChannel()
    settler.reset(fresh)
    assert len(settler) == 0 and settler.outstanding == 0
    d = Delivery(1)
    settler.track(d)
    settler.ack(d)
    ioloop.end_turn()
    assert fresh.sent == [("ack", 1, True)] and channel.sent == []


def test_a_refused_ack_goes_to_on_error():
    errors = []
    channel, ioloop, settler, ds = settler_with(
        1, on_error=lambda what, exc: errors.append(what))
    settler.ack(ds[0])
    channel.refuse = True
    ioloop.end_turn()
    assert errors == ["acknowledging"]
    assert not settler.nack(Delivery(2), requeue=False)
    assert errors == ["acknowledging", "nacking"]


def test_a_refused_ack_without_on_error_raises():
    channel, ioloop, settler, ds = settler_with(1)
    settler.ack(ds[0])
    channel.refuse = True
    with pytest.raises(pika.exceptions.ChannelWrongStateError):
        ioloop.end_turn()


def test_after_acks_counts_the_deliveries_each_pass_acked():
    counts = []
    channel, ioloop, settler, ds = settler_with(3, after_acks=counts.append)
    settler.ack(ds[0])
    settler.ack(ds[2])
    ioloop.end_turn()
    settler.ack(ds[1])
    ioloop.end_turn()
    assert counts == [1, 2]
    assert channel.sent == [("ack", 1, True), ("ack", 3, True)]

