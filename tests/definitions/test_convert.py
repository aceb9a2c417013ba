"""rtroute.definitions.convert: a definitions export with x-rtopic exchanges in, one a broker
without the plugin imports out; everything else as it was, every change and refusal reported."""
from __future__ import annotations

import copy
import json

import pytest

from rtroute.definitions import DefinitionsError, convert


def export(**extra):
    """A whole-broker export as RabbitMQ 3.10.8 with the plugin writes it (trimmed)."""
    data = {
        "rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
        "users": [{"name": "app", "password_hash": "x", "tags": []}],
        "vhosts": [{"name": "/"}, {"name": "v2"}],
        "permissions": [{"user": "app", "vhost": "/", "configure": ".*", "write": ".*",
                         "read": ".*"}],
        "parameters": [], "global_parameters": [], "policies": [],
        "queues": [{"name": "A", "vhost": "/", "durable": True, "auto_delete": False,
                    "arguments": {}}],
        "exchanges": [
            {"name": "logs", "vhost": "/", "type": "x-rtopic", "durable": True,
             "auto_delete": False, "internal": False,
             "arguments": {"alternate-exchange": "unrouted"}},
            {"name": "unrouted", "vhost": "/", "type": "fanout", "durable": True,
             "auto_delete": False, "internal": False, "arguments": {}},
            {"name": "logs", "vhost": "v2", "type": "topic", "durable": True,
             "auto_delete": False, "internal": False, "arguments": {}}],
        "bindings": [
            {"source": "logs", "vhost": "/", "destination": "A", "destination_type": "queue",
             "routing_key": "server1.app1.mod1.info", "arguments": {}},
            {"source": "logs", "vhost": "v2", "destination": "B",
             "destination_type": "queue", "routing_key": "a.*", "arguments": {}}],
    }
    data.update(extra)
    return data


def by_name(items, vhost="/"):
    return {x["name"]: x for x in items if x.get("vhost") == vhost}


def test_an_x_rtopic_exchange_becomes_the_proxys_layout_and_its_bindings_move():
    conversion = convert(export())
    out = conversion.definitions
    exchanges = by_name(out["exchanges"])
    assert exchanges["logs"]["type"] == "fanout"
    assert exchanges["logs"]["arguments"] == {"x-rtroute-layout": "rtopic"}
    # the client's arguments go where the routing happens, as the proxy declares them
    assert exchanges["logs.bindings"]["type"] == "direct"
    assert exchanges["logs.bindings"]["arguments"] == {"alternate-exchange": "unrouted"}
    assert exchanges["rtroute.rtopic"] == {
        "vhost": "/", "name": "rtroute.rtopic", "type": "direct", "durable": True,
        "auto_delete": False, "internal": True, "arguments": {}}
    bindings = [b for b in out["bindings"] if b["vhost"] == "/"]
    assert {"source": "logs.bindings", "vhost": "/", "destination": "A",
            "destination_type": "queue", "routing_key": "server1.app1.mod1.info",
            "arguments": {}} in bindings
    assert {"vhost": "/", "source": "rtroute.rtopic", "destination": "logs.bindings",
            "destination_type": "exchange", "routing_key": "logs", "arguments": {}} in bindings
    assert [f.subject for f in conversion.converted] == ["exchange 'logs'"]
    assert "1 binding(s) moved" in conversion.converted[0].text
    assert not conversion.cannot


def test_everything_else_is_kept_as_it_was_and_the_input_is_not_changed():
    original = export()
    kept = copy.deepcopy(original)
    out = convert(original).definitions
    assert original == kept
    # the other vhost's topic exchange named logs and its binding are not touched
    assert by_name(out["exchanges"], "v2")["logs"] == kept["exchanges"][2]
    assert kept["bindings"][1] in out["bindings"]
    for key in ("users", "vhosts", "permissions", "queues", "rabbit_version"):
        assert out[key] == kept[key]


def test_converting_twice_changes_nothing_more():
    once = convert(export()).definitions
    again = convert(once)
    assert again.definitions == once
    assert again.findings == []


def test_on_rabbitmq_3_the_bindings_exchange_is_a_topic_one_and_literal_wildcards_are_flagged():
    data = export()
    data["bindings"][0]["routing_key"] = "a.*.c"
    conversion = convert(data, target_version="3.13.7")
    assert by_name(conversion.definitions["exchanges"])["logs.bindings"]["type"] == "topic"
    [check] = [f for f in conversion.findings if f.kind == "check"]
    assert "a.*.c" in check.subject and "wildcard" in check.text
    # on 4.x NAME.bindings is direct: such a key stays a plain word, nothing to say
    assert not [f for f in convert(data).findings if f.kind == "check"]


def test_the_sidecar_layout_has_an_ingress_queue_bound_to_the_fanout():
    out = convert(export(), layout="sidecar").definitions
    queue = by_name(out["queues"])["rtroute.ingress.logs"]
    assert queue["arguments"] == {"x-single-active-consumer": True, "x-queue-type": "quorum"}
    assert {"vhost": "/", "source": "logs", "destination": "rtroute.ingress.logs",
            "destination_type": "queue", "routing_key": "", "arguments": {}} in out["bindings"]
    assert "rtroute.rtopic" not in by_name(out["exchanges"])


def test_what_the_broker_routes_into_name_cannot_be_carried_with_the_proxys_layout():
    data = export()
    data["exchanges"].append({"name": "feed", "vhost": "/", "type": "topic", "durable": True,
                              "auto_delete": False, "internal": False,
                              "arguments": {"alternate-exchange": "logs"}})
    data["bindings"].append({"source": "feed", "vhost": "/", "destination": "logs",
                             "destination_type": "exchange", "routing_key": "#",
                             "arguments": {}})
    data["queues"][0]["arguments"] = {"x-dead-letter-exchange": "logs"}
    data["policies"] = [{"name": "dlx", "vhost": "/", "pattern": "^q", "apply-to": "queues",
                         "priority": 0, "definition": {"dead-letter-exchange": "logs"}}]
    cannot = convert(data).cannot
    assert sorted(f.subject for f in cannot) == [
        "binding 'feed' -> 'logs'", "exchange 'feed'", "policy 'dlx'", "queue 'A'"]
    assert all("--layout sidecar" in f.text for f in cannot)
    # the sidecar's ingress queue takes what the broker routes into NAME
    assert not convert(data, layout="sidecar").cannot


def test_a_policy_or_permission_that_covers_name_but_not_name_bindings_is_flagged():
    data = export(policies=[{"name": "ae", "vhost": "/", "pattern": "^logs$",
                             "apply-to": "exchanges", "priority": 0,
                             "definition": {"alternate-exchange": "unrouted"}}])
    data["permissions"][0]["read"] = "^(logs|A)$"
    checks = {f.subject: f.text for f in convert(data).findings if f.kind == "check"}
    assert "'^logs(\\.bindings)?$'" in checks["policy 'ae'"]
    assert "read covers 'logs'" in checks["permissions of user 'app'"]
    data["permissions"][0]["read"] = "^(logs(\\.bindings)?|A)$"
    data["policies"][0]["pattern"] = "^logs"
    assert not [f for f in convert(data).findings if f.kind == "check"]


def test_classic_mirroring_keys_are_dropped_for_rabbitmq_4_and_kept_for_3():
    policies = [{"name": "ha-all", "vhost": "/", "pattern": ".*", "apply-to": "queues",
                 "priority": 0, "definition": {"ha-mode": "all", "ha-sync-mode": "automatic"}},
                {"name": "ha-ttl", "vhost": "/", "pattern": "^t", "apply-to": "queues",
                 "priority": 1, "definition": {"ha-mode": "all", "message-ttl": 60000}}]
    conversion = convert(export(policies=copy.deepcopy(policies)))
    assert conversion.definitions["policies"] == [
        {**policies[1], "definition": {"message-ttl": 60000}}]
    changed = {f.subject: f.text for f in conversion.findings if f.kind == "changed"}
    assert changed["policy 'ha-all'"].startswith("removed")
    assert "dropped ha-mode" in changed["policy 'ha-ttl'"]
    assert convert(export(policies=policies), target_version="3.13").definitions[
        "policies"] == policies


def test_a_one_vhost_export_stays_without_vhost_fields():
    data = export()
    for kind in ("exchanges", "bindings", "queues"):
        data[kind] = [{k: v for k, v in x.items() if k != "vhost"} for x in data[kind]
                      if x.get("vhost") == "/"]
    del data["vhosts"]
    out = convert(data).definitions
    assert all("vhost" not in x for x in out["exchanges"] + out["bindings"])
    assert {x["name"] for x in out["exchanges"]} == {
        "logs", "logs.bindings", "rtroute.rtopic", "unrouted"}


def test_a_name_bindings_that_exists_already_is_refused_not_overwritten():
    data = export()
    data["exchanges"].append({"name": "logs.bindings", "vhost": "/", "type": "fanout",
                              "durable": True, "auto_delete": False, "internal": False,
                              "arguments": {}})
    conversion = convert(data)
    [cannot] = conversion.cannot
    assert "'logs.bindings' already exists" in cannot.text
    assert by_name(conversion.definitions["exchanges"])["logs"]["type"] == "x-rtopic"


@pytest.mark.parametrize(("data", "message"), [
    ([], "a JSON object"),
    ({"foo": 1}, "not a RabbitMQ definitions export"),
    ({"exchanges": {}}, "'exchanges' is dict"),
    ({"exchanges": [{"type": "x-rtopic"}]}, "exchanges[0] has no name"),
    ({"bindings": [{"source": "x"}]}, "bindings[0] needs source"),
])
def test_what_is_not_an_export_is_refused_with_the_reason(data, message):
    with pytest.raises(DefinitionsError, match=message.replace("[", r"\[")):
        convert(data)


def test_an_unknown_layout_or_version_is_refused():
    with pytest.raises(DefinitionsError, match="unknown layout"):
        convert(export(), layout="plugin")
    with pytest.raises(DefinitionsError, match="not a RabbitMQ version"):
        convert(export(), target_version="latest")


def test_the_report_is_json():
    report = convert(export()).report()
    assert json.loads(json.dumps(report))["converted"] == 1
