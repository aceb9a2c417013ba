"""RTopicPublisher against the real broker: the plugin's A-F table, CC and real BCC, unroutable
messages, bad headers, large match sets, binding changes while running, connection loss."""
from __future__ import annotations

import time
import uuid

import pika
import pytest

from rtroute import RTopicPublisher
from rtroute.amqp.confirm_window import Outcome
from rtroute.publisher import PublishFailed, PublishNacked, PublishReturned
from rtroute.routing import PreconditionFailed
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

from ..conftest import wait_for

PLUGIN = PLUGIN_QUEUES  # the rtopic plugin README's queues A-F and their keys
README_TABLE = PLUGIN_README_TABLE


@pytest.fixture
def managed(channel, mgmt):
    """A fresh ``NAME`` whose ``NAME.bindings`` exists (as the sidecar declares it)."""
    name = f"rtroute.test.pub.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare(f"{name}.bindings", "topic", durable=True)
    yield name
    channel.exchange_delete(f"{name}.bindings")


def bind_queues(channel, name: str, table: dict[str, str]) -> dict[str, str]:
    """Exclusive queues bound to ``NAME.bindings``; returns letter -> queue name."""
    queues = {}
    for letter, key in table.items():
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, f"{name}.bindings", key)
        queues[letter] = queue
    return queues


def drain(channel, queue: str) -> list[tuple]:
    got = []
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        got.append((method, properties, body))


def publisher(name: str, broker_uri: str, management_uri: str, **kwargs) -> RTopicPublisher:
    return RTopicPublisher(broker_uri, name, management_uri=management_uri, **kwargs)


def test_the_plugins_readme_table_through_the_library(channel, managed, broker_uri,
                                                       management_uri):
    queues = bind_queues(channel, managed, PLUGIN)
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: len(pub.bindings) == len(PLUGIN))
        for key, expected in README_TABLE:
            assert pub.publish(key, key.encode()).result(timeout=10) is Outcome.ACKED
            for letter, queue in queues.items():
                got = drain(channel, queue)
                assert len(got) == (letter in expected), (key, letter)
                if got:  # the routing key arrives as published, from NAME.bindings
                    method, _properties, body = got[0]
                    assert (method.routing_key, method.exchange, body) == \
                        (key, f"{managed}.bindings", key.encode())


def test_cc_kept_real_bcc_routed_and_stripped(channel, managed, broker_uri, management_uri):
    queues = bind_queues(channel, managed, PLUGIN)
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: len(pub.bindings) == len(PLUGIN))
        future = pub.publish("server1.app1.mod1.info", b"x",
                             properties=pika.BasicProperties(content_type="text/plain",
                                                             priority=3),
                             headers={"CC": ["server2.#"], "BCC": ["#.error"], "other": 7})
        future.result(timeout=10)
        assert set(future.matched) >= {"server1.app1.mod1.error", "server2.app2.mod1.warning"}
    for letter, queue in queues.items():
        got = drain(channel, queue)
        assert len(got) == (letter in "ABDF"), letter
        for method, properties, _body in got:
            assert properties.headers == {"CC": ["server2.#"], "other": 7}
            assert (properties.content_type, properties.priority) == ("text/plain", 3)
            assert method.routing_key == "server1.app1.mod1.info"


def test_matched_key_delivery_reaches_the_plugins_queues_with_the_key_in_a_header(
        channel, managed, broker_uri, management_uri):
    """delivery="matched-key": the plugin's A-F deliveries; a message that matched one
    binding key arrives with that key as its routing key and the key as published in
    x-rtroute-routing-key, other messages as with BCC (the key as published, no header)."""
    queues = bind_queues(channel, managed, PLUGIN)
    with publisher(managed, broker_uri, management_uri, delivery="matched-key") as pub:
        wait_for(lambda: len(pub.bindings) == len(PLUGIN))
        rewritten = 0
        for key, expected in [*README_TABLE, ("*.app2.mod1.warning", "D"),
                              ("server1.*.mod2.#", "E")]:
            future = pub.publish(key, key.encode(), headers={"other": 7})
            assert future.result(timeout=10) is Outcome.ACKED
            for letter, queue in queues.items():
                got = drain(channel, queue)
                assert len(got) == (letter in expected), (key, letter)
                for method, properties, body in got:
                    assert (method.exchange, body) == (f"{managed}.bindings", key.encode())
                    if len(future.matched) == 1 and future.matched[0] != key:
                        assert method.routing_key == future.matched[0] == PLUGIN[letter]
                        assert properties.headers == {"other": 7,
                                                      "x-rtroute-routing-key": key}
                        rewritten += 1
                    else:
                        assert method.routing_key == key
                        assert properties.headers == {"other": 7}
        assert rewritten == 2
        # a real BCC still routes (and is stripped); a CC keeps the key as published
        pub.publish("server1.app1.mod1.info", b"b", headers={"BCC": ["#.error"]}
                    ).result(timeout=10)
        pub.publish("nothing.here", b"c", headers={"CC": ["server2.#"]}).result(timeout=10)
    got = {letter: drain(channel, queue) for letter, queue in queues.items()}
    assert sorted(letter for letter, msgs in got.items() for _ in msgs) == \
        ["A", "B", "D", "F"]
    for letter, msgs in got.items():
        for method, properties, body in msgs:
            assert "BCC" not in (properties.headers or {})
            if body == b"c":
                assert (method.routing_key, properties.headers) == \
                    ("nothing.here", {"CC": ["server2.#"]})


@pytest.mark.parametrize("header", [None, "x-published-as"])
def test_matched_key_delivery_names_or_leaves_out_the_published_key_header(
        channel, managed, broker_uri, management_uri, header):
    """published_key_header: the key as published travels in the named header, or in none
    (then a plain message arrives with no headers at all, as a plain publish)."""
    queues = bind_queues(channel, managed, {"A": "a.b", "B": "c.d"})
    with publisher(managed, broker_uri, management_uri, delivery="matched-key",
                   published_key_header=header) as pub:
        wait_for(lambda: len(pub.bindings) == 2)
        for _ in range(3):  # the second and third reuse the first's frames
            pub.publish("*.b", b"plain")
        pub.publish("*.b", b"with headers", headers={"other": 7})
        assert pub.wait_for_confirms(timeout=10)
    got = drain(channel, queues["A"])
    assert [body for _m, _p, body in got] == [b"plain"] * 3 + [b"with headers"]
    assert not drain(channel, queues["B"])
    for method, properties, body in got:
        assert method.routing_key == "a.b"
        expected = {"other": 7} if body == b"with headers" else {}
        if header is not None:
            expected[header] = "*.b"
        assert (properties.headers or {}) == expected


@pytest.mark.parametrize("header", ["", "CC", "BCC", "x-rtroute-bcc", 5])
def test_published_key_header_must_be_a_name_of_its_own(broker_uri, header):
    with pytest.raises(ValueError, match="published_key_header must be None or a header"):
        RTopicPublisher(broker_uri, "x", delivery="matched-key", published_key_header=header,
                        connect_timeout=0)


def test_delivery_must_be_bcc_or_matched_key(broker_uri):
    with pytest.raises(ValueError, match="delivery must be one of bcc, matched-key"):
        RTopicPublisher(broker_uri, "x", delivery="queues")


def test_unroutable_mandatory_is_returned_and_a_plain_one_is_confirmed(
        channel, managed, broker_uri, management_uri):
    bind_queues(channel, managed, {"A": "a.b"})
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: pub.bindings)
        with pytest.raises(PublishReturned) as info:
            pub.publish("x.#", b"m", mandatory=True).result(timeout=10)
        assert info.value.reply_code == 312
        future = pub.publish("x.#", b"plain")
        assert future.result(timeout=10) is Outcome.ACKED and future.matched == ()
        assert pub.status()["unroutable"] == 2


def test_a_full_queue_that_rejects_publishes_nacks_those_messages_only(
        channel, managed, broker_uri, management_uri):
    # x-overflow=reject-publish: the broker nacks what the full queue refuses (RabbitMQ 3.x
    # and 4.x alike); the publisher's futures say which messages those were
    queue = channel.queue_declare("", exclusive=True, arguments={
        "x-max-length": 3, "x-overflow": "reject-publish"}).method.queue
    channel.queue_bind(queue, f"{managed}.bindings", "full.q")
    for delivery in ("bcc", "matched-key"):
        channel.queue_purge(queue)
        with publisher(managed, broker_uri, management_uri, delivery=delivery) as pub:
            wait_for(lambda: pub.bindings)
            futures = [pub.publish("full.*", b"m%d" % i) for i in range(10)]
            assert pub.wait_for_confirms(timeout=30)
            outcomes = []
            for future in futures:
                try:
                    outcomes.append(future.result(timeout=0))
                except PublishNacked:
                    outcomes.append("nacked")
            assert outcomes == [Outcome.ACKED] * 3 + ["nacked"] * 7, delivery
            status = pub.status()
            assert (status["confirmed"], status["failed"]) == (3, 7)
        assert [body for _m, _p, body in drain(channel, queue)] == [b"m0", b"m1", b"m2"]


def test_unroutable_reaches_the_alternate_exchange_of_name_bindings(channel, broker_uri,
                                                                    management_uri,
                                                                    monkeypatch):
    import rtroute.publisher.engine

    # a frame cache that starts over often: no publish may take another's frames
    monkeypatch.setattr(rtroute.publisher.engine, "FRAME_CACHE", 4)
    name = f"rtroute.test.pub.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare(f"{name}.unroutable", "fanout", durable=True)
    channel.exchange_declare(f"{name}.bindings", "topic", durable=True,
                             arguments={"alternate-exchange": f"{name}.unroutable"})
    try:
        kept = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(kept, f"{name}.unroutable")
        with publisher(name, broker_uri, management_uri) as pub:
            pub.publish("no.#.such", b"m", mandatory=True).result(timeout=10)
            # many in one batch, each with its own key and frames
            keys = [f"none.{i}" for i in range(300)]
            futures = [pub.publish(key, key.encode()) for key in keys]
            assert pub.wait_for_confirms(timeout=30)
            assert all(f.exception() is None for f in futures)
        got = drain(channel, kept)
        assert [body for _m, _p, body in got[:1]] == [b"m"]
        assert [(m.routing_key, body) for m, _p, body in got[1:]] == \
            [(key, key.encode()) for key in keys]
    finally:
        channel.exchange_delete(f"{name}.bindings")
        channel.exchange_delete(f"{name}.unroutable")


def test_a_bad_header_fails_its_future_and_the_next_message_goes_on(
        channel, managed, broker_uri, management_uri):
    queues = bind_queues(channel, managed, {"A": "a.b"})
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: pub.bindings)
        bad = pub.publish("a.b", b"bad", headers={"CC": "a.b"})
        good = pub.publish("a.*", b"good")
        with pytest.raises(PreconditionFailed, match="CC"):
            bad.result(timeout=10)
        good.result(timeout=10)
    assert [body for _m, _p, body in drain(channel, queues["A"])] == [b"good"]


def test_a_match_set_larger_than_one_header_frame_gives_each_queue_one_copy(
        channel, managed, broker_uri, management_uri):
    # 2 x 900 keys of ~110 bytes: ~200 KB of BCC, more than frame_max (128 KiB)
    queues = {}
    for letter in "XY":
        queue = channel.queue_declare("", exclusive=True).method.queue
        for i in range(900):
            channel.queue_bind(queue, f"{managed}.bindings", f"{letter}.{i:04d}." + "w" * 100)
        queues[letter] = queue
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: len(pub.bindings) == 1800, timeout=30)
        future = pub.publish("#", b"big")
        future.result(timeout=20)
        assert len(future.matched) == 1800
        # the 1,800 keys reach two queues: a BCC of one key per queue covers them, in one
        # publish (the whole set would not fit a header frame)
        assert pub.status()["published"] == 1
    for queue in queues.values():
        assert [body for _m, _p, body in drain(channel, queue)] == [b"big"]


def test_bindings_made_and_removed_while_running_are_followed(channel, managed, broker_uri,
                                                              management_uri):
    with publisher(managed, broker_uri, management_uri) as pub:
        queue = channel.queue_declare("", exclusive=True).method.queue
        bound_at = time.monotonic()
        channel.queue_bind(queue, f"{managed}.bindings", "late.key")
        wait_for(lambda: pub.publish("late.*", b"p").result(timeout=5) and
                 drain(channel, queue), timeout=10)
        seen_after = time.monotonic() - bound_at
        channel.queue_unbind(queue, f"{managed}.bindings", "late.key")
        wait_for(lambda: not pub.bindings, timeout=10)
        pub.publish("late.*", b"after").result(timeout=5)
        assert drain(channel, queue) == []
    print(f"bind -> first message routed: {seen_after * 1000:.0f} ms")


def test_connection_closed_by_the_broker_reconnects_and_no_message_is_stuck(
        channel, managed, broker_uri, management_uri, mgmt):
    queues = bind_queues(channel, managed, {"A": "a.b"})
    connection_name = f"rtroute-test-pub-{uuid.uuid4().hex[:6]}"
    with publisher(managed, broker_uri, management_uri,
                   connection_name=connection_name) as pub:
        wait_for(lambda: pub.bindings)
        futures = [pub.publish("a.b", str(i).encode()) for i in range(2000)]
        wait_for(lambda: mgmt.connection_names(connection_name), timeout=15)
        mgmt.close_connections_named(connection_name)
        futures += [pub.publish("a.b", str(i).encode()) for i in range(2000, 3000)]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=30))
            except PublishFailed:
                outcomes.append("failed")
        assert pub.publish("a.b", b"after").result(timeout=30) is Outcome.ACKED
    confirmed = outcomes.count(Outcome.ACKED)
    bodies = [body for _m, _p, body in drain(channel, queues["A"])]
    # every confirmed message arrived (at least once); failed ones may or may not have
    assert len(set(bodies) - {b"after"}) >= confirmed
    assert b"after" in bodies


def test_a_missing_bindings_exchange_is_a_clear_error_at_once(broker_uri, management_uri):
    # (waiting for the timeout would say "not ready after 600 s: declarations failed ...")
    with pytest.raises(ConnectionError, match=r"does not exist: start the sidecar") as raised:
        RTopicPublisher(broker_uri, f"rtroute.test.none.{uuid.uuid4().hex[:6]}",
                        management_uri=management_uri, connect_timeout=600)
    # no timeout passed: it cannot start, and the advice is the layout rtroute declares
    assert "cannot start" in str(raised.value) and "not ready after" not in str(raised.value)
    assert "rtroute run --rtopic" in str(raised.value) and "x-rtopic" in str(raised.value)
    assert "durable topic exchange" not in str(raised.value)


def test_many_threads_publish_at_once(channel, managed, broker_uri, management_uri):
    import threading

    queues = bind_queues(channel, managed, {"A": "t.k"})
    with publisher(managed, broker_uri, management_uri, max_pending=100) as pub:
        wait_for(lambda: pub.bindings)
        futures: list = []

        def work(n: int) -> None:
            futures.extend(pub.publish("t.*", f"{n}.{i}".encode()) for i in range(500))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert pub.wait_for_confirms(timeout=30)
        assert all(f.result(timeout=0) is Outcome.ACKED for f in futures)
    bodies = [body for _m, _p, body in drain(channel, queues["A"])]
    assert sorted(bodies) == sorted(f"{n}.{i}".encode() for n in range(4) for i in range(500))


def test_publishing_after_close_is_refused(managed, broker_uri, management_uri):
    from rtroute.publisher import PublisherClosed

    pub = publisher(managed, broker_uri, management_uri)
    pub.close()
    with pytest.raises(PublisherClosed):
        pub.publish("a.b", b"x")


def test_rtroute_publish_route_locally(channel, managed, broker_uri, management_uri):
    from click.testing import CliRunner

    from rtroute.cli import main

    queues = bind_queues(channel, managed, {"A": "a.b", "B": "audit.all"})
    result = CliRunner().invoke(main, [
        "publish", "--uri", broker_uri, "--management-uri", management_uri,
        "--exchange", managed, "--routing-key", "*.b", "-n", "50", "--route-locally",
        "--bcc", "audit.all"])
    assert result.exit_code == 0, result.output
    assert "routed here and published" in result.output
    assert len(drain(channel, queues["A"])) == 50
    assert len(drain(channel, queues["B"])) == 50


def test_rtroute_publish_route_locally_by_matched_key(channel, managed, broker_uri,
                                                     management_uri):
    from click.testing import CliRunner

    from rtroute.cli import main

    queues = bind_queues(channel, managed, {"A": "a.b", "B": "c.d"})
    result = CliRunner().invoke(main, [
        "publish", "--uri", broker_uri, "--management-uri", management_uri,
        "--exchange", managed, "--routing-key", "*.b", "-n", "20", "--route-locally",
        "--delivery", "matched-key", "--persistent"])
    assert result.exit_code == 0, result.output
    got = drain(channel, queues["A"])
    assert len(got) == 20 and not drain(channel, queues["B"])
    for method, properties, _body in got:
        assert method.routing_key == "a.b" and properties.delivery_mode == 2
        assert properties.headers == {"x-rtroute-routing-key": "*.b"}


def test_rtroute_publish_by_matched_key_without_the_published_key_header(
        channel, managed, broker_uri, management_uri):
    from click.testing import CliRunner

    from rtroute.cli import main

    queues = bind_queues(channel, managed, {"A": "a.b"})
    result = CliRunner().invoke(main, [
        "publish", "--uri", broker_uri, "--management-uri", management_uri,
        "--exchange", managed, "--routing-key", "*.b", "-n", "5", "--route-locally",
        "--delivery", "matched-key", "--published-key-header", ""])
    assert result.exit_code == 0, result.output
    got = drain(channel, queues["A"])
    assert [(m.routing_key, p.headers) for m, p, _b in got] == [("a.b", None)] * 5


def test_rtroute_publish_published_key_header_needs_matched_key_delivery():
    from click.testing import CliRunner

    from rtroute.cli import PUBLISHED_KEY_HEADER_DEFAULT, main
    from rtroute.publisher import PUBLISHED_KEY_HEADER

    assert PUBLISHED_KEY_HEADER_DEFAULT == PUBLISHED_KEY_HEADER  # the CLI's copy of it
    result = CliRunner().invoke(main, ["publish", "--exchange", "x", "--route-locally",
                                       "--published-key-header", ""])
    assert result.exit_code == 2
    assert "--published-key-header needs --delivery matched-key" in result.output


def test_rtroute_publish_delivery_without_route_locally_is_a_usage_error():
    from click.testing import CliRunner

    from rtroute.cli import main

    result = CliRunner().invoke(main, ["publish", "--exchange", "x", "--delivery",
                                       "matched-key"])
    assert result.exit_code == 2 and "--delivery needs --route-locally" in result.output


def test_rtroute_publish_bcc_without_route_locally_is_a_usage_error():
    from click.testing import CliRunner

    from rtroute.cli import main

    result = CliRunner().invoke(main, ["publish", "--exchange", "x", "--bcc", "k"])
    assert result.exit_code == 2 and "--bcc needs --route-locally" in result.output


@pytest.mark.parametrize("size", [0, 1, 131_064, 131_065, 1_000_000])
def test_bodies_of_every_size_arrive_intact(channel, managed, broker_uri, management_uri,
                                            size):
    queues = bind_queues(channel, managed, {"A": "a.b"})
    body = bytes(i % 251 for i in range(size))
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: pub.bindings)
        pub.publish("a.*", body, headers={"k": 1.5}).result(timeout=20)
    got = drain(channel, queues["A"])
    assert [b for _m, _p, b in got] == [body]
    assert got[0][1].headers is not None and "k" in got[0][1].headers


def test_headers_larger_than_a_frame_fail_that_message_only(channel, managed, broker_uri,
                                                            management_uri):
    queues = bind_queues(channel, managed, {"A": "a.b"})
    with publisher(managed, broker_uri, management_uri) as pub:
        wait_for(lambda: pub.bindings)
        big = pub.publish("a.b", b"big", headers={"pad": "x" * 200_000})
        ok = pub.publish("a.b", b"ok")
        with pytest.raises(ValueError, match="frame_max"):
            big.result(timeout=10)
        ok.result(timeout=10)
    assert [b for _m, _p, b in drain(channel, queues["A"])] == [b"ok"]


def test_a_direct_bindings_exchange_as_rabbitmq_4_layouts_have_it(channel, broker_uri,
                                                                   management_uri):
    """RabbitMQ 4 indexes direct routing, so 4.x layouts declare NAME.bindings as direct; a
    bound key with a literal '*' word is then plain words, as with the plugin."""
    name = f"rtroute.test.pub.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare(f"{name}.bindings", "direct", durable=True)
    try:
        queues = bind_queues(channel, name, {**PLUGIN, "W": "server1.*.mod1.info"})
        with publisher(name, broker_uri, management_uri) as pub:
            wait_for(lambda: len(pub.bindings) == 7)
            with_w = {"#.info", "#.mod1.info", "#"}  # the keys whose pattern spans W
            for key, expected in [*((k, e + "W" * (k in with_w)) for k, e in README_TABLE),
                                  ("server1.*.mod1.info", "ACW")]:
                pub.publish(key, key.encode()).result(timeout=10)
                for letter, queue in queues.items():
                    assert len(drain(channel, queue)) == (letter in expected), (key, letter)
    finally:
        channel.exchange_delete(f"{name}.bindings")
