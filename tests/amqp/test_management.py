"""The management API client against the real broker (and its error paths)."""
from __future__ import annotations

import pytest

from rtroute.amqp import ManagementClient, ManagementError, NotFound


def test_client_is_derived_from_the_amqp_uri():
    client = ManagementClient.from_amqp_uri("amqp://fred:secret@10.1.2.3:5672/v")
    assert client.base_url == "http://10.1.2.3:15672/api/"
    assert client.username == "fred"
    assert "secret" not in repr(client)
    explicit = ManagementClient.from_amqp_uri("amqp://fred:secret@h/v",
                                              "http://admin:pw@127.0.0.1:15673/prefix/")
    assert explicit.base_url == "http://127.0.0.1:15673/prefix/api/"
    assert explicit.username == "admin"


def test_management_url_must_be_http():
    with pytest.raises(ValueError, match="http"):
        ManagementClient("ftp://u:secret@h/")


@pytest.mark.broker
def test_exchange_bindings_lists_queue_and_exchange_destinations(channel, names, mgmt):
    source, queue, target = names.exchange(), names.queue(), names.exchange("dest")
    channel.exchange_declare(source, "direct")
    channel.exchange_declare(target, "fanout")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, source, "k1", arguments={"x-note": "a", "n": 1})
    channel.queue_bind(queue, source, "k2")
    channel.exchange_bind(target, source, "k3")
    rows = mgmt.exchange_bindings(source)
    assert {(b.destination, b.destination_type, b.routing_key) for b in rows} == {
        (queue, "queue", "k1"), (queue, "queue", "k2"), (target, "exchange", "k3"),
    }
    assert next(b for b in rows if b.routing_key == "k1").arguments == {"x-note": "a", "n": 1}
    assert {b.source for b in rows} == {source} and {b.vhost for b in rows} == {"/"}


@pytest.mark.broker
def test_missing_exchange_has_no_bindings_but_is_not_found(mgmt, names):
    missing = names.exchange("missing")
    assert mgmt.exchange_bindings(missing) == []  # the API answers 200 []
    assert not mgmt.exchange_exists(missing)
    with pytest.raises(NotFound) as info:
        mgmt.exchange(missing)
    assert info.value.status == 404


@pytest.mark.broker
def test_queues_and_message_count(channel, names, mgmt, until):
    queue = names.queue()
    channel.queue_declare(queue, durable=True)
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}")
    listed = mgmt.queues("/", columns=("name", "messages"))
    assert queue in {row["name"] for row in listed}
    assert mgmt.queue(queue)["name"] == queue
    until(lambda: mgmt.queue_message_count(queue) == 3)  # statistics lag a few seconds
    with pytest.raises(NotFound):
        mgmt.queue(names.queue("missing"))


@pytest.mark.broker
def test_bad_credentials_give_a_clear_error_without_the_password(mgmt):
    client = ManagementClient(mgmt.base_url.removesuffix("api/"), username="guest",
                              password="wrong-secret", timeout=5)
    with pytest.raises(ManagementError) as info:
        client.overview()
    assert info.value.status == 401
    assert "wrong-secret" not in str(info.value)
    assert f"GET {mgmt.base_url}overview: HTTP 401" in str(info.value)


def test_unreachable_api_is_reported_as_such():
    client = ManagementClient("http://127.0.0.1:1/", timeout=2)
    with pytest.raises(ManagementError, match="unreachable") as info:
        client.overview()
    assert info.value.status is None


@pytest.mark.broker
def test_shovel_parameters_are_created_and_deleted_or_refused_without_the_plugin(mgmt, names):
    name = names.queue("shovel")
    value = {"src-uri": "amqp://", "src-queue": names.queue("src"),
             "dest-uri": "amqp://", "dest-queue": names.queue("dst")}
    try:
        mgmt.put_shovel(name, value)
    except ManagementError as exc:
        assert exc.status == 400
        assert "component shovel not found" in str(exc)
        return
    mgmt.delete_shovel(name)
    with pytest.raises(NotFound):
        mgmt.delete_shovel(name)


def test_a_list_of_amqp_uris_derives_one_api_per_host_in_order():
    client = ManagementClient.from_amqp_uri(["amqp://u:p@n1:5672/v", "amqp://u:p@n2:5672/v",
                                             "amqp://u:p@n1:5673/v"])
    assert [base for base, _auth in client._bases] == [
        "http://n1:15672/api/", "http://n2:15672/api/"]
    assert client.base_url == "http://n1:15672/api/"


@pytest.mark.broker
def test_a_node_that_cannot_be_reached_fails_over_to_the_next_and_stays_there(
        broker_uri, management_uri):
    from rtroute.amqp.broker_identity import identity_from_overview
    from rtroute.ops.netaddr import free_port

    down = f"http://127.0.0.1:{free_port()}/"
    client = ManagementClient.from_amqp_uri(broker_uri, [down, management_uri], timeout=2)
    real = ManagementClient.from_amqp_uri(broker_uri, management_uri)
    client.expect_broker(identity_from_overview(real.overview()), "amqp://broker")
    assert client.overview()["cluster_name"] == real.overview()["cluster_name"]
    assert client.base_url == real.base_url            # the one that answered
    client.overview()
    assert client.base_url == real.base_url            # and it stays there


@pytest.mark.broker
def test_an_error_answer_is_not_a_reason_to_fail_over(broker_uri, management_uri):
    client = ManagementClient.from_amqp_uri(broker_uri, [management_uri, management_uri])
    with pytest.raises(NotFound):
        client.queue("rtroute-test.no-such-queue")
    assert client._current == 0
