"""The stream-protocol reader gives the rows of the AMQP 0-9-1 reader, on the real brokers; the
source falls back to AMQP 0-9-1 where the stream port does not answer."""
from __future__ import annotations

import logging
import socket
import ssl
import threading

import pika
import pytest

from rtroute.amqp.stream_protocol import StreamProtocolConnection, StreamProtocolError
from rtroute.spark import stream_consumer, stream_protocol_reader
from rtroute.spark.stream_source import RabbitMQStreamReader, StreamOptions

from ..conftest import stream_uri_for_test
from ..shovel.conftest import _make_certificates
from .stream_support import messages, publish, rabbit_stream

pytestmark = [pytest.mark.broker, pytest.mark.every_broker]


@pytest.fixture
def stream_uri(broker_uri):
    uri = stream_uri_for_test(broker_uri)
    if uri is None:
        pytest.skip("no stream port known for this broker (set RTROUTE_TEST_STREAM_URI)")
    return uri


def _rows(batches) -> list[dict]:
    rows = [row for batch in batches for row in batch.to_pylist()]
    for row in rows:
        del row["drained_at"]
    return rows


def _every_property(uri: str, stream: str) -> None:
    """Messages with every basic property, binary bodies, an empty one, and headers of every
    kind a stream keeps on some version (arrays, tables, x- names, CC)."""
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish(stream, "k.a", b"\x00\x01binary\xff", pika.BasicProperties(
            headers={"s": "x", "n": 5, "b": True, "big": 2**40, "neg": -3, "CC": ["a.b", 7],
                     "x-list": [1, "a"], "x-t": {"k": 1}, "cc": ["c"]},
            message_id="m1", timestamp=1_700_000_000, content_type="text/plain",
            content_encoding="gzip", correlation_id="c1", reply_to="r q/1", expiration="60000",
            type="t", user_id="guest", app_id="app", delivery_mode=2, priority=3))
        channel.basic_publish(stream, "", b"", pika.BasicProperties())
        channel.basic_publish(stream, "k.b.c", bytes(range(256)),
                              pika.BasicProperties(headers={"only": "one"}, delivery_mode=1))
    finally:
        connection.close()


def test_the_stream_protocol_gives_the_rows_of_amqp_0_9_1(broker_uri, stream_uri):
    with rabbit_stream(broker_uri, "protocol-rows") as stream:
        _every_property(broker_uri, stream)
        publish(broker_uri, stream, messages(400, seed=11))
        count = 403
        old = _rows(stream_consumer.read_range(broker_uri, stream, 0, count))
        new = _rows(stream_protocol_reader.read_range(stream_uri, stream, 0, count))
        assert [r["offset"] for r in new] == list(range(count))
        assert new == old
        assert new[0]["timestamp"] is not None and new[0]["app_id"] == "app"


def test_a_range_across_chunks_an_empty_range_and_a_start_past_the_tail(broker_uri, stream_uri):
    with rabbit_stream(broker_uri, "protocol-ranges") as stream:
        for first in range(0, 300, 100):  # each publish confirmed one by one: many chunks
            publish(broker_uri, stream, messages(100, seed=first, first_id=first))
        connection = StreamProtocolConnection(stream_uri)
        try:
            connection.subscribe(stream, 0, credit=1)
            assert connection.next_chunk(30).records < 300  # the stream has several chunks
        finally:
            connection.close()
        for low, high in ((0, 300), (57, 243), (299, 300), (150, 151)):
            new = _rows(stream_protocol_reader.read_range(stream_uri, stream, low, high,
                                                          batch_rows=37))
            assert new == _rows(stream_consumer.read_range(broker_uri, stream, low, high))
            assert [r["offset"] for r in new] == list(range(low, high))
        assert list(stream_protocol_reader.read_range(stream_uri, stream, 100, 100)) == []
        with pytest.raises(stream_consumer.StreamReadError, match="no message for"):
            list(stream_protocol_reader.read_range(stream_uri, stream, 400, 401, timeout=0.5))


def test_a_range_read_over_several_connections_is_the_same_rows_in_order(broker_uri,
                                                                        stream_uri,
                                                                        monkeypatch):
    monkeypatch.setattr(stream_protocol_reader, "MIN_SPLIT_OFFSETS", 20)
    with rabbit_stream(broker_uri, "protocol-split") as stream:
        for first in range(0, 300, 100):
            publish(broker_uri, stream, messages(100, seed=first, first_id=first))
        whole = _rows(stream_protocol_reader.read_range(stream_uri, stream, 0, 300))
        for low, high, connections in ((0, 300, 3), (57, 243, 4), (10, 90, 8), (5, 30, 2)):
            split = _rows(stream_protocol_reader.read_range(
                stream_uri, stream, low, high, batch_rows=37, connections=connections))
            assert split == whole[low:high]


def test_offsets_found_over_the_stream_protocol_are_those_found_over_amqp_0_9_1(broker_uri,
                                                                               stream_uri):
    with rabbit_stream(broker_uri, "sp-tail-0") as one, \
            rabbit_stream(broker_uri, "sp-tail-1") as two, \
            rabbit_stream(broker_uri, "sp-tail-empty") as empty:
        publish(broker_uri, one, messages(700, seed=1))
        publish(broker_uri, two, messages(40, seed=2))
        streams = [one, two, empty]
        starts = {one: "first", two: "last", empty: "first"}
        over_amqp = stream_consumer.StreamConnection(broker_uri)
        connection = StreamProtocolConnection(stream_uri)
        try:
            # several streams at once: each one's first chunk counts, whichever comes first
            found = stream_protocol_reader.tails(connection, streams, 0.5)
            assert found == stream_consumer.tails(over_amqp, streams, 0.5) == {one: 700,
                                                                               two: 40}
            assert stream_protocol_reader.resolve_starts(connection, starts, 0.5) == \
                stream_consumer.resolve_starts(over_amqp, starts, 0.5)
            assert stream_protocol_reader.resolve_starts(connection, {one: "next", two: 5,
                                                                      empty: "next"}, 0.5) == {
                one: 700, two: 5, empty: 0}
            with pytest.raises(StreamProtocolError, match="does not exist"):
                stream_protocol_reader.tails(connection, [one, "rtroute-test.no-such"], 0.5)
            assert stream_protocol_reader.tails(connection, [two], 0.5) == {two: 40}
        finally:
            connection.close()
            over_amqp.close()


def test_a_missing_stream_is_a_read_error(stream_uri):
    with pytest.raises(stream_consumer.StreamReadError, match="does not exist"):
        list(stream_protocol_reader.read_range(stream_uri, "rtroute-test.no-such-stream", 0, 1))


def test_a_wrong_password_is_refused(stream_uri):
    wrong = stream_uri.replace("guest:guest@", "guest:wrong@")
    with pytest.raises(StreamProtocolError, match="authentication"):
        StreamProtocolConnection(wrong)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_source_falls_back_to_amqp_0_9_1_when_the_stream_port_is_closed(
        broker_uri, stream_uri, caplog):
    closed = f"rabbitmq-stream://guest:guest@127.0.0.1:{_closed_port()}/%2F"
    reader = RabbitMQStreamReader(StreamOptions({"uri": broker_uri, "stream": "s",
                                                 "streamUri": closed}))
    with caplog.at_level(logging.INFO, logger="rtroute.spark"):
        try:
            assert reader.reader_uri() is None
            partition = reader.partitions({"s": 0}, {"s": 10})[0]
        finally:
            reader.stop()
    assert partition.stream_uri is None
    assert "reading over AMQP 0-9-1" in caplog.text


def test_the_source_reads_over_the_stream_protocol_where_it_answers(broker_uri, stream_uri,
                                                                   caplog):
    reader = RabbitMQStreamReader(StreamOptions({"uri": broker_uri, "stream": "s",
                                                 "streamUri": stream_uri}))
    with caplog.at_level(logging.INFO, logger="rtroute.spark"):
        try:
            assert [p.stream_uri for p in reader.partitions({"s": 0}, {"s": 10})] \
                == [stream_uri]
        finally:
            reader.stop()
    assert "reading over the stream protocol" in caplog.text


def _tls_forwarder(certs, target: tuple[str, int]) -> tuple[socket.socket, int]:
    """A TLS listener (a certificate of the private CA in ``certs``) that forwards each
    connection, decrypted, to ``target``: the broker's stream port as a TLS listener would
    serve it (our brokers have none)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "server.pem", certs / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                secure = context.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()
                continue
            upstream = socket.create_connection(target)
            for a, b in ((secure, upstream), (upstream, secure)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_rabbitmq_stream_tls_reads_through_a_private_ca(broker_uri, stream_uri, tmp_path):
    _make_certificates(tmp_path)
    target = stream_uri.rsplit("@", 1)[1].split("/")[0].rsplit(":", 1)
    listener, port = _tls_forwarder(tmp_path, (target[0], int(target[1])))
    tls_uri = (f"rabbitmq-stream+tls://guest:guest@localhost:{port}/%2F"
               f"?cacertfile={tmp_path / 'ca.pem'}")
    try:
        with rabbit_stream(broker_uri, "protocol-tls") as stream:
            publish(broker_uri, stream, messages(50, seed=5))
            rows = _rows(stream_protocol_reader.read_range(tls_uri, stream, 0, 50))
            assert rows == _rows(stream_consumer.read_range(broker_uri, stream, 0, 50))
        with pytest.raises(StreamProtocolError):  # the system CAs do not know the private CA
            StreamProtocolConnection(f"rabbitmq-stream+tls://guest:guest@localhost:{port}/%2F")
    finally:
        listener.close()


def test_auto_refuses_a_stream_port_of_another_cluster(broker_uri, stream_uri, caplog,
                                                       monkeypatch):
    other = {5552: 5554, 5553: 5552, 5554: 5552}
    port = int(stream_uri.rsplit(":", 1)[1].split("/")[0])
    if port not in other:
        pytest.skip("no other broker's stream port known")
    reader = RabbitMQStreamReader(StreamOptions({"uri": broker_uri, "stream": "s"}))
    reader.options.stream_uri = "auto"
    monkeypatch.setattr("rtroute.amqp.stream_protocol.stream_uri_for",
                        lambda uri: stream_uri.replace(f":{port}/", f":{other[port]}/"))
    try:
        with caplog.at_level(logging.INFO, logger="rtroute.spark"):
            assert reader.reader_uri() is None
    finally:
        reader.stop()
    assert "not" in caplog.text and "set streamUri" in caplog.text


def test_a_stream_uri_of_another_cluster_is_refused(broker_uri, stream_uri):
    other = {5552: 5554, 5553: 5552, 5554: 5552}
    port = int(stream_uri.rsplit(":", 1)[1].split("/")[0])
    if port not in other:
        pytest.skip("no other broker's stream port known")
    elsewhere = stream_uri.replace(f":{port}/", f":{other[port]}/")
    reader = RabbitMQStreamReader(StreamOptions({"uri": broker_uri, "stream": "s",
                                                 "streamUri": elsewhere}))
    try:
        with pytest.raises(ValueError, match="is a node of cluster"):
            reader.reader_uri()
    finally:
        reader.stop()
