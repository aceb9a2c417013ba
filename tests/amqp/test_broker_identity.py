"""Which management API belongs to which broker: the pure check, and the client's guard against
the real brokers (the test broker's own API, and a client told to expect another broker)."""
from __future__ import annotations

import pytest

from rtroute.amqp import ManagementClient, connect_blocking
from rtroute.amqp.broker_identity import (
    BrokerIdentity,
    BrokerMismatch,
    check_same_broker,
    identity_from_overview,
    identity_from_server_properties,
)
from rtroute.amqp.management import WrongBroker


def test_same_cluster_name_is_the_same_broker():
    check_same_broker(BrokerIdentity("rabbit@a", "3.10.8"), BrokerIdentity("rabbit@a", "3.10.8"),
                      "amqp://h:5672", "http://h:15672/")


def test_nodes_of_one_cluster_on_other_versions_are_the_same_broker():
    check_same_broker(BrokerIdentity("prod", "3.13.7"), BrokerIdentity("prod", "4.0.5"),
                      "amqp://h:5672", "http://h:15672/")


def test_other_cluster_name_is_refused_with_one_line_naming_the_option():
    with pytest.raises(BrokerMismatch) as err:
        check_same_broker(BrokerIdentity("rabbit4@vm", "4.0.5"), BrokerIdentity("rabbit@vm",
                          "3.10.8"), "amqp://guest:***@127.0.0.1:5673/%2F",
                          "http://127.0.0.1:15672/", option="--management-uri")
    message = str(err.value)
    assert "\n" not in message
    assert "--management-uri" in message
    assert "'rabbit@vm'" in message and "'rabbit4@vm'" in message
    assert "http://127.0.0.1:15673/" in message  # the port convention, as a hint


def test_no_hint_when_the_convention_gives_the_api_already_asked():
    with pytest.raises(BrokerMismatch) as err:
        check_same_broker(BrokerIdentity("a"), BrokerIdentity("b"), "amqp://h:5672/",
                          "http://h:15672/")
    assert "convention" not in str(err.value)


@pytest.mark.parametrize("amqp, management", [(None, "b"), ("a", None), (None, None)])
def test_a_side_that_names_no_cluster_cannot_be_checked(amqp, management):
    check_same_broker(BrokerIdentity(amqp), BrokerIdentity(management), "amqp://h", "http://h/")


def test_identities_are_read_from_both_answers_bytes_or_text():
    assert identity_from_server_properties({"cluster_name": b"c", "version": b"4.0.5"}) == \
        BrokerIdentity("c", "4.0.5")
    assert identity_from_server_properties(None) == BrokerIdentity(None, None)
    assert identity_from_overview({"cluster_name": "c", "rabbitmq_version": "3.10.8"}) == \
        BrokerIdentity("c", "3.10.8")


def _amqp_identity(uri: str) -> BrokerIdentity:
    connection = connect_blocking(uri)
    try:
        return identity_from_server_properties(connection._impl.server_properties)
    finally:
        connection.close()


@pytest.mark.broker
def test_the_brokers_own_api_is_recognised(broker_uri, mgmt):
    client = ManagementClient(mgmt.base_url[:-4], "guest", "guest", timeout=5)
    client.expect_broker(_amqp_identity(broker_uri), "amqp://test")
    assert client.verify_broker().cluster_name == _amqp_identity(broker_uri).cluster_name
    assert client.overview()["cluster_name"]


@pytest.mark.broker
def test_a_client_expecting_another_broker_answers_nothing(mgmt):
    client = ManagementClient(mgmt.base_url[:-4], "guest", "guest", timeout=5)
    client.expect_broker(BrokerIdentity("some-other-cluster@elsewhere"), "amqp://elsewhere:5673",
                         option="--management-uri")
    for _ in range(2):  # every request, not only the first
        with pytest.raises(WrongBroker, match="--management-uri"):
            client.exchange_bindings("amq.direct")


def test_a_cluster_without_a_name_of_its_own_matches_across_its_nodes():
    from rtroute.amqp.broker_identity import is_default_name_of

    nodes = ["rabbit-1@localhost", "rabbit-2@localhost", "rabbit-3@localhost"]
    # RabbitMQ 3.10: each node of an unnamed cluster says NODE@FQDN of the machine
    amqp = BrokerIdentity("rabbit-1@vm", "3.10.8")
    api = BrokerIdentity("rabbit-2@vm", "3.10.8")
    check_same_broker(amqp, api, "amqp://n1", "http://n2/", management_nodes=nodes)
    assert is_default_name_of("rabbit@host.example.com", ["rabbit@host"])
    assert is_default_name_of("rabbit@host", ["rabbit@host.example.com"])
    assert not is_default_name_of("rabbit@hosta", ["rabbit@hostb"])
    assert not is_default_name_of("rabbit4@vm", nodes)
    # another broker: its name is no default of the API's nodes
    with pytest.raises(BrokerMismatch):
        check_same_broker(BrokerIdentity("rabbit@vm"), api, "amqp://other", "http://n2/",
                          management_nodes=nodes)
    # a single node is never matched this way: its own name would have been equal
    with pytest.raises(BrokerMismatch):
        check_same_broker(amqp, BrokerIdentity("rabbit-2@vm"), "amqp://n1", "http://n2/",
                          management_nodes=["rabbit-2@localhost"])
