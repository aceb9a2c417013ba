"""An x-rtopic declaration that cannot hold: ``NAME`` exists with another type than the layout's
fanout, or ``NAME.bindings`` with another type than the proxy's. The client's channel is closed
with 406 PRECONDITION_FAILED as RabbitMQ closes it for an inequivalent declaration (with the
plugin, the text names ``x-rtopic``), nothing is left behind, and the connection goes on."""
from __future__ import annotations

import pika
import pika.exceptions
import pytest

from rtroute.amqp import ManagementClient, NotFound

from ..conftest import wait_for
from .conftest import assert_round_trip

pytestmark = pytest.mark.broker


def _type(mgmt: ManagementClient, uri: str, exchange: str) -> str | None:
    """The type of ``exchange`` in the vhost of ``uri`` (None: there is none)."""
    try:
        return mgmt.exchange(exchange, _vhost(uri))["type"]
    except NotFound:
        return None


def _vhost(uri: str) -> str:
    return pika.URLParameters(uri).virtual_host


def _refusal_beside(proxy_uri: str, broker_uri: str, name: str, existing: str, kind: str
                    ) -> pika.exceptions.ChannelClosedByBroker:
    """:func:`_refusal` once ``existing`` was declared as a ``kind`` exchange on the broker."""
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        direct.channel().exchange_declare(existing, kind, durable=True)
        return _refusal(proxy_uri, name)
    finally:
        direct.close()


def _refusal(uri: str, name: str) -> pika.exceptions.ChannelClosedByBroker:
    """Declares ``name`` as x-rtopic through the proxy at ``uri``; the broker's refusal. The
    same connection then declares and uses another x-rtopic exchange."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as raised:
            ch.exchange_declare(name, "x-rtopic", durable=True)
        other = f"{name}-other"
        ch = conn.channel()
        assert_round_trip(ch, other, b"after the refusal")
        ch.exchange_delete(other)
        return raised.value
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["fanout", "headers", "the other one"])
def test_name_bindings_of_another_type_is_refused(proxies, exchange_name, broker_uri, mgmt,
                                                  kind, broker_version):
    """``the other one``: topic on RabbitMQ 4, direct before (the proxy declares the other)."""
    name = exchange_name
    ours = "direct" if broker_version >= (4,) else "topic"
    if kind == "the other one":
        kind = "topic" if ours == "direct" else "direct"
    refused = _refusal_beside(proxies().uri, broker_uri, name, f"{name}.bindings", kind)
    assert refused.reply_code == 406
    # a reply text is a short string: cut to 255 bytes (RabbitMQ 4 spells the vhost longer)
    assert refused.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}.bindings' in vhost "
        f"'{_vhost(broker_uri)}': received '{ours}' but current is '{kind}' (the binding table "
        f"of x-rtopic exchange '{name}': delete it or use another name)")[:255]
    assert _type(mgmt, broker_uri, name) is None                  # NAME was not declared
    assert _type(mgmt, broker_uri, f"{name}.bindings") == kind    # nor NAME.bindings changed


@pytest.mark.parametrize("kind", ["topic", "direct", "headers"])
def test_name_of_another_type_is_refused_as_with_the_plugin(proxies, exchange_name, broker_uri,
                                                            mgmt, kind):
    name = exchange_name
    refused = _refusal_beside(proxies().uri, broker_uri, name, name, kind)
    assert refused.reply_code == 406
    assert refused.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost "
        f"'{_vhost(broker_uri)}': received ''x-rtopic'' but current is '{kind}'")  # sic
    assert _type(mgmt, broker_uri, name) == kind
    # the NAME.bindings declared before NAME was refused is not left behind
    wait_for(lambda: _type(mgmt, broker_uri, f"{name}.bindings") is None, timeout=10)


def test_a_name_bindings_in_use_is_not_deleted_after_a_refusal(proxies, exchange_name,
                                                               broker_uri, mgmt, broker_version):
    """NAME is a topic exchange and its NAME.bindings (of the proxy's type) has a binding: the
    refusal leaves it as it is."""
    name = exchange_name
    ours = "direct" if broker_version >= (4,) else "topic"
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        ch = direct.channel()
        ch.exchange_declare(name, "topic", durable=True)
        ch.exchange_declare(f"{name}.bindings", ours, durable=True)
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, f"{name}.bindings", "a.b")
        refused = _refusal(proxies().uri, name)
        assert refused.reply_code == 406
        direct.process_data_events(time_limit=1)  # time for a deletion that must not come
        assert _type(mgmt, broker_uri, f"{name}.bindings") == ours
    finally:
        direct.close()


@pytest.mark.parametrize("kind", ["topic", "direct", "headers"])
@pytest.mark.parametrize("nowait", [False, True])
def test_an_x_rtopic_redeclared_with_another_type_is_refused_as_with_the_plugin(
        proxies, exchange_name, broker_uri, kind, nowait):
    # before: "but current is 'fanout'", the layout's type the client never declared
    conn = pika.BlockingConnection(pika.URLParameters(proxies().uri))
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as raised:
            if nowait:  # the refusal comes as the next method's answer
                ch._impl.exchange_declare(exchange_name, kind, callback=None)
                ch.exchange_declare(exchange_name, "x-rtopic", passive=True)
            else:
                ch.exchange_declare(exchange_name, kind)
        assert raised.value.reply_code == 406
        assert raised.value.reply_text == (
            f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange_name}' in "
            f"vhost '{_vhost(broker_uri)}': received '{kind}' but current is ''x-rtopic''")
        assert_round_trip(conn.channel(), exchange_name, b"still x-rtopic")
    finally:
        conn.close()
