"""A message the broker would refuse to take (a content header frame above frame_max) is
dead-lettered before it can break the connection: one bad message never stalls the others.

Before: a divert copy whose headers grew past frame_max (the ``_AMQ_ORIG_*`` headers added to an
original within ~190 bytes of the limit) made RabbitMQ close the connection with FRAME_ERROR;
the sidecar reconnected, got the message again, republished the original again (3-5 duplicates
in 45 s) and other exchanges starved.
"""
from __future__ import annotations

import time

import pika
import pytest

from .conftest import depth, divert_status, drain, wait_depth

pytestmark = pytest.mark.broker


def test_an_oversized_copy_is_dead_lettered_once_while_other_exchanges_flow(
        run_config, channel, managed, objects):
    big, other = managed("oversized"), managed("neighbour")
    target, big_local = objects.queue(f"{big}.target"), objects.queue(f"{big}.local")
    other_local = objects.queue(f"{other}.local")
    dead = objects.dead_letters()
    sc = run_config(
        [{"name": big, "kind": "fanout"}, {"name": other, "kind": "fanout"}],
        [{"name": f"{big}-copy", "address": big, "forwarding_address": target,
          "routing_type": "ANYCAST"}])
    channel.queue_bind(big_local, f"{big}.bindings")
    channel.queue_bind(other_local, f"{other}.bindings")
    channel.confirm_delivery()

    def publish(exchange, body, headers=None):
        channel.basic_publish(exchange, "", body, pika.BasicProperties(
            headers=headers, message_id=body.decode()))

    publish(big, b"small-1")
    publish(other, b"other-1")
    publish(big, b"huge", {"pad": "p" * 131_040})  # fits as published, not with _AMQ_ORIG_*
    publish(other, b"other-2")
    publish(big, b"small-2")
    wait_depth(channel, other_local, 2)
    wait_depth(channel, target, 2)
    wait_depth(channel, dead, 1)
    time.sleep(2)  # room for duplicates, had the connection broken
    assert [b for _, _, b in drain(channel, other_local)] == [b"other-1", b"other-2"]
    assert [b for _, _, b in drain(channel, target)] == [b"small-1", b"small-2"]
    assert sorted(b for _, _, b in drain(channel, big_local)) == \
        [b"huge", b"small-1", b"small-2"]  # the original goes on untouched
    ((_, props, body),) = drain(channel, dead)
    assert body == b"huge"
    assert "frame_max" in props.headers["x-rtroute-error"]
    assert props.headers["x-rtroute-divert"] == f"{big}-copy"
    assert divert_status(sc, f"{big}-copy")["dead_lettered"] == 1
    status = sc.status()
    assert status["connects"] == 1  # never reconnected
    assert depth(channel, f"rtroute.ingress.{big}") == 0
