"""JMS*/AMQ* identifiers resolve from the AMQP 0-9-1 basic properties and delivery facts."""
from __future__ import annotations

from datetime import datetime, timezone

import pika
import pytest

from rtroute.selector import STANDARD_FIELDS, MessageFacts, compile

PROPS = pika.BasicProperties(
    message_id="order-42",
    correlation_id="req-7",
    type="invoice",
    priority=7,
    timestamp=1_700_000_000,
    delivery_mode=2,
    expiration="60000",
    user_id="guest",
    headers={"JMSXGroupID": "group-a", "office": "NY"},
)
FACTS = MessageFacts(PROPS, body_size=123, exchange="orders")


@pytest.mark.parametrize("text", [
    "JMSMessageID = 'order-42'",
    "AMQUserID = 'order-42'",
    "JMSCorrelationID = 'req-7'",
    "JMSType = 'invoice'",
    "JMSPriority = 7",
    "AMQPriority > 4",
    "JMSTimestamp = 1700000000000",
    "AMQTimestamp = 1700000000000",
    "JMSDeliveryMode = 'PERSISTENT'",
    "AMQDurable = 'DURABLE'",
    "JMSExpiration = 1700000060000",
    "AMQExpiration = 1700000060000",
    "AMQSize = 123",
    "AMQAddress = 'orders'",
    "AMQGroupID = 'group-a'",
    "JMSXGroupID = 'group-a'",
    "JMSXUserID = 'guest'",
    "office = 'NY'",
    '"JMSType" = \'invoice\'',
])
def test_standard_fields_resolve_from_pika_properties(outcome, text):
    assert outcome(text, PROPS.headers, FACTS) is True


def test_properties_may_be_given_as_a_mapping(outcome):
    facts = MessageFacts({"priority": 1, "delivery_mode": 1, "type": "t"}, exchange="")
    assert outcome("JMSPriority = 1 AND AMQDurable = 'NON_DURABLE' AND JMSType = 't'", {},
                   facts) is True
    assert outcome("JMSDeliveryMode = 'NON_PERSISTENT' AND AMQAddress = ''", {}, facts) is True


def test_defaults_when_properties_are_absent(outcome):
    facts = MessageFacts(pika.BasicProperties())
    assert outcome("JMSPriority = 4", {}, facts) is True             # the JMS default
    assert outcome("AMQDurable = 'NON_DURABLE'", {}, facts) is True  # AMQP default: transient
    assert outcome("JMSDeliveryMode = 'NON_PERSISTENT'", {}, facts) is True
    assert outcome("AMQExpiration = 0", {}, facts) is True            # 0: never expires
    assert outcome("JMSTimestamp IS NULL", {}, facts) is True
    assert outcome("JMSMessageID IS NULL", {}, facts) is True
    assert outcome("AMQSize IS NULL", {}, facts) is True
    assert outcome("AMQAddress IS NULL", {}, facts) is True


def test_expiration_without_timestamp_is_unknown(outcome):
    facts = MessageFacts({"expiration": "5000"})
    assert outcome("JMSExpiration > 0", {}, facts) is None


def test_timestamp_may_be_a_datetime(outcome):
    facts = MessageFacts({"timestamp": datetime(2024, 1, 1, tzinfo=timezone.utc)})
    assert outcome("JMSTimestamp = 1704067200000", {}, facts) is True


def test_a_missing_field_falls_back_to_the_header_of_the_same_name(outcome):
    facts = MessageFacts(pika.BasicProperties())
    assert outcome("JMSType = 'from-header'", {"JMSType": "from-header"}, facts) is True
    assert outcome("AMQSize = 9", {"AMQSize": 9}, facts) is True


def test_a_present_field_wins_over_a_header_of_the_same_name(outcome):
    assert outcome("JMSType = 'invoice'", {"JMSType": "other"}, FACTS) is True


def test_without_message_facts_fields_are_plain_headers(outcome):
    headers = {"JMSPriority": 9, "AMQDurable": "yes"}
    assert outcome("JMSPriority = 9 AND AMQDurable = 'yes'", headers) is True
    assert outcome("JMSType IS NULL", headers) is True


def test_field_names_are_case_sensitive(outcome):
    assert outcome("jmspriority IS NULL", {}, FACTS) is True
    assert outcome("JMSPRIORITY IS NULL", {}, FACTS) is True


def test_timestamps_are_java_longs_in_arithmetic(outcome):
    # a Long plus an Integer is a Long: no 32-bit wrap
    assert outcome("JMSTimestamp + 1 = 1700000000001", {}, FACTS) is True
    assert outcome("JMSTimestamp / 1000 = 1700000000", {}, FACTS) is True


def test_selector_reports_whether_it_needs_message_facts():
    assert compile("JMSPriority > 4").needs_message is True
    assert compile("office = 'NY'").needs_message is False
    assert compile("JMSPriority > 4 AND office = 'NY'").identifiers == {"JMSPriority", "office"}


def test_standard_fields_are_the_documented_set():
    assert STANDARD_FIELDS == {
        "JMSMessageID", "JMSPriority", "JMSTimestamp", "JMSCorrelationID", "JMSType",
        "JMSDeliveryMode", "JMSExpiration", "JMSXUserID",
        "AMQPriority", "AMQTimestamp", "AMQDurable", "AMQExpiration", "AMQSize", "AMQUserID",
        "AMQAddress", "AMQGroupID",
    }
