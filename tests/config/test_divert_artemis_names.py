"""Drop-in compatibility of divert definitions with Artemis: a name used twice keeps the first
(with a warning carrying the file and line), Artemis's key spellings, and updates that change
only what Artemis's ``updateDivert`` changes."""
from __future__ import annotations

import json
import logging

import pytest

from rtroute.config.rtroute_toml import (
    DIVERT_KEY_SPELLINGS,
    ConfigError,
    DivertConfig,
    loads,
    loads_divert,
    loads_divert_update,
)

EX = '[[exchange]]\nname = "logs"\n'
TWICE = (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
         '[[divert]]\nname = "e"\naddress = "logs"\nforwarding_address = "z"\n'
         '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "y"\n')


def test_a_divert_name_used_twice_keeps_the_first_with_a_warning_at_the_duplicate(caplog):
    """Artemis's deployDivert deploys the first and logs "binding already exists" for the
    next one, instead of refusing the whole configuration."""
    with caplog.at_level(logging.WARNING, logger="rtroute.config.rtroute_toml"):
        config = loads(TWICE, "rtroute.toml")
    assert [(d.name, d.forwarding_address) for d in config.diverts] == [("d", "x"), ("e", "z")]
    assert config.warnings == (("rtroute.toml:12: divert 'd': name used twice (first defined "
                                "on line 4); this one is ignored and the first is kept, as "
                                "Artemis does"),)
    assert [r.getMessage() for r in caplog.records] == list(config.warnings)


def test_an_ignored_duplicate_takes_no_part_in_the_cycle_check():
    text = (EX + '[[exchange]]\nname = "b"\n'
            '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "b"\n'
            '[[divert]]\nname = "d"\naddress = "b"\nforwarding_address = "logs"\n')
    assert [d.address for d in loads(text).diverts] == ["logs"]


def test_a_duplicate_is_still_validated():
    with pytest.raises(ConfigError) as info:
        loads(TWICE + 'exclusive = "yes"\n', "rtroute.toml")
    assert info.value.line == 15 and "exclusive must be a boolean" in info.value.message


ARTEMIS_JSON = {  # DivertConfiguration.toJSON() of Artemis, with a Python transformer
    "name": "prices-divert", "routing-name": "r", "address": "priceUpdates",
    "forwarding-address": "priceForwarding", "exclusive": True,
    "filter-string": "office = 'New York'",
    "transformer-configuration": {"class-name": "pkg.mod:fn"}, "routing-type": "ANYCAST"}
MANAGEMENT = {  # the parameter names of ActiveMQServerControl.createDivert
    "name": "prices-divert", "routingName": "r", "address": "priceUpdates",
    "forwardingAddress": "priceForwarding", "exclusive": True,
    "filterString": "office = 'New York'", "transformerClassName": "pkg.mod:fn",
    "routingType": "ANYCAST"}
OURS = DivertConfig(name="prices-divert", address="priceUpdates",
                    forwarding_address="priceForwarding", filter="office = 'New York'",
                    exclusive=True, routing_name="r", routing_type="ANYCAST",
                    transformer="pkg.mod:fn")


@pytest.mark.parametrize("body", [ARTEMIS_JSON, MANAGEMENT], ids=["json", "management"])
def test_artemis_key_names_are_accepted(body):
    assert loads_divert(json.dumps(body)) == OURS


def test_artemis_key_names_in_the_config_file():
    text = (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding-address = "x"\n'
            'filter-string = "a = 1"\nrouting-type = "MULTICAST"\nrouting-name = "g"\n'
            'transformer-class-name = "pkg.mod:fn"\n')
    (d,) = loads(text).diverts
    assert (d.forwarding_address, d.filter, d.routing_type, d.routing_name, d.transformer) == \
        ("x", "a = 1", "MULTICAST", "g", "pkg.mod:fn")


@pytest.mark.parametrize("key", sorted(DIVERT_KEY_SPELLINGS))
def test_two_spellings_of_one_key_must_agree(key):
    value = {"forwarding_address": "q", "routing_name": "g", "filter": "a = 1",
             "routing_type": "ANYCAST", "transformer": "pkg.mod:fn", "routing_key": "k"}[key]
    spelling = DIVERT_KEY_SPELLINGS[key][0]
    base = {"name": "d", "address": "logs", "forwarding_address": "q"}
    same = loads_divert(json.dumps({**base, key: value, spelling: value}))
    assert getattr(same, key) == value
    other = "pkg.mod:other" if key == "transformer" else ("MULTICAST" if key == "routing_type"
                                                          else "b = 2" if key == "filter"
                                                          else "other")
    text = json.dumps({**base, key: value, spelling: other}, indent=1)
    with pytest.raises(ConfigError) as info:
        loads_divert(text)
    assert f"'{key}' and '{spelling}' are two spellings of {key} with different values" \
        in info.value.message
    assert info.value.line == text.splitlines().index(
        next(line for line in text.splitlines() if f'"{spelling}"' in line)) + 1


def test_transformer_configuration_with_properties_is_refused():
    body = {**ARTEMIS_JSON, "transformer-configuration": {"class-name": "pkg.mod:fn",
                                                          "properties": {"a": "b"}}}
    with pytest.raises(ConfigError, match="take no properties"):
        loads_divert(json.dumps(body))


def test_null_is_an_absent_filter_routing_key_or_transformer():
    body = {"name": "d", "address": "logs", "forwarding_address": "q", "filter-string": None,
            "transformer": None, "routing_key": None}
    assert loads_divert(json.dumps(body)) == DivertConfig("d", "logs", "q", routing_name="d")


CURRENT = DivertConfig(name="d", address="logs", forwarding_address="q", filter="a = 1",
                       exclusive=True, routing_name="d", routing_type="ANYCAST",
                       transformer="pkg.mod:fn")


def test_patch_changes_only_the_keys_given_and_null_clears():
    got = loads_divert_update('{"filterString": null, "forwarding-address": "r, s"}', CURRENT)
    assert got == DivertConfig(name="d", address="logs", forwarding_address="r,s",
                               exclusive=True, routing_name="d", routing_type="ANYCAST",
                               transformer="pkg.mod:fn")
    assert loads_divert_update("{}", CURRENT) == CURRENT
    assert loads_divert_update('{"name": "d", "exclusive": true}', CURRENT) == CURRENT


def test_put_replaces_the_whole_divert_with_defaults_for_what_is_left_out():
    got = loads_divert_update('{"address": "logs", "forwarding_address": "r", '
                              '"exclusive": true}', CURRENT, replace=True)
    assert got == DivertConfig(name="d", address="logs", forwarding_address="r",
                               exclusive=True, routing_name="d")


@pytest.mark.parametrize("body,replace,message", [
    ('{"exclusive": false}', False, "exclusive cannot be changed by an update"),
    ('{"address": "other"}', False, "address cannot be changed by an update"),
    ('{"routing-name": "g"}', False, "routing_name cannot be changed by an update"),
    ('{"name": "e"}', False, "a divert cannot be renamed"),
    ('{"address": "logs", "forwarding_address": "r"}', True,
     "exclusive cannot be changed by an update"),
    ('{"routing-type": "SIDEWAYS"}', False, "routing-type must be one of"),
    ('{"filter": "a >"}', False, "invalid selector"),
    ('{"colour": 1}', False, "unknown key 'colour'"),
])
def test_an_update_changes_only_what_artemis_updates(body, replace, message):
    with pytest.raises(ConfigError) as info:
        loads_divert_update(body, CURRENT, replace)
    assert message in info.value.message
