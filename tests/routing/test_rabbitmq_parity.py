"""The library's TopicExchange/DirectExchange and CC/BCC rules, checked against the real broker."""
import random
import uuid

import pytest

from rtroute import DirectExchange, TopicExchange
from rtroute.routing import PreconditionFailed

pika = pytest.importorskip("pika")
pytestmark = pytest.mark.broker


@pytest.fixture
def channel(broker_uri):
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    yield conn
    conn.close()


def _setup(conn, kind, bindings):
    ch = conn.channel()
    ex = f"rtroute.test.{uuid.uuid4().hex[:8]}"
    ch.exchange_declare(ex, kind, auto_delete=True)
    queues = {}
    for dest, key in bindings:
        if dest not in queues:
            queues[dest] = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queues[dest], ex, key)
    return ch, ex, queues


def _received(ch, queues):
    got = {}
    for dest, q in queues.items():
        bodies = []
        while True:
            method, _props, body = ch.basic_get(q, auto_ack=True)
            if method is None:
                break
            bodies.append((body.decode(), _props.headers))
        got[dest] = bodies
    return got


def test_topic_exchange_matches_rabbitmq_on_random_keys(channel):
    rnd = random.Random(7)
    words = ["a", "b", "", "c"]
    bindings = set()
    for i in range(40):
        n = rnd.randint(0, 4)
        key = ".".join(rnd.choice(words + ["*", "#"]) for _ in range(n))
        bindings.add((f"d{i % 12}", key))
    ch, ex, queues = _setup(channel, "topic", sorted(bindings))
    lib = TopicExchange()
    for d, k in bindings:
        lib.bind(d, k)
    ch.confirm_delivery()
    keys = [".".join(rnd.choice(words) for _ in range(rnd.randint(0, 4))) for _ in range(60)]
    for i, key in enumerate(keys):
        ch.basic_publish(ex, key, str(i).encode())
    got = _received(ch, queues)
    for i, key in enumerate(keys):
        expected = lib.route(key).destinations
        actual = {d for d, bodies in got.items() if str(i) in [b for b, _ in bodies]}
        assert actual == expected, key
    assert all(len(b) == len(set(b)) for b in got.values())


def test_cc_bcc_delivery_matches_rabbitmq(channel):
    bindings = [("q1", "k1"), ("q2", "k2"), ("q2", "k3"), ("q3", "k3")]
    ch, ex, queues = _setup(channel, "direct", bindings)
    lib = DirectExchange()
    for d, k in bindings:
        lib.bind(d, k)
    ch.confirm_delivery()
    headers = {"CC": ["k2", b"k1", 5], "BCC": ["k3", "k2"], "x": "y"}
    ch.basic_publish(ex, "none", b"m", pika.BasicProperties(headers=headers))
    got = _received(ch, queues)
    expected = lib.route("none", headers)
    assert {d for d, b in got.items() if b} == expected.destinations == {"q2", "q3"}
    for d in expected.destinations:
        assert len(got[d]) == 1  # one copy even though q2 matched via CC and BCC
        assert got[d][0][1] == expected.headers  # CC kept as published, BCC gone


@pytest.mark.parametrize("value", ["k1", None, 5])
def test_non_array_cc_closes_the_channel_like_the_library_says(channel, value):
    ch = channel.channel()
    reasons = []
    ch._impl.add_on_close_callback(lambda _c, reason: reasons.append(reason))
    ch.basic_publish("amq.direct", "none", b"x", pika.BasicProperties(headers={"CC": value}))
    for _ in range(20):
        channel.process_data_events(0.1)
        if reasons:
            break
    with pytest.raises(PreconditionFailed) as err:
        DirectExchange().route("none", headers={"CC": value})
    assert reasons and reasons[0].reply_code == 406
    assert reasons[0].reply_text == f"PRECONDITION_FAILED - {err.value}"
