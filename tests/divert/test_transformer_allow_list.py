"""Diverts made at run time may name only the transformers the config file allows: the name is
code the sidecar imports and runs, so neither whoever reaches the HTTP endpoint nor whoever can
set broker parameters may choose it (before: ``code:interact`` and ``antigravity:geohash`` were
imported)."""
from __future__ import annotations

import time

import pytest

from .conftest import divert_status, http

pytestmark = pytest.mark.broker

TOKEN = "allow-list-token"


def test_a_transformer_not_on_the_allow_list_is_refused_before_any_import(
        run_config, managed, objects):
    name = managed("allow")
    target = objects.queue(f"{name}.target")
    sc = run_config([{"name": name, "kind": "topic"}],
                    http={"token": TOKEN,
                          "allowed_transformers": ["tests.divert.transformers:tag"]})
    refused = {"name": f"{name}-evil", "address": name, "forwarding_address": target,
               "routing_type": "ANYCAST", "transformer": "antigravity:geohash"}
    code, answer = http(sc, "POST", "/diverts", refused, TOKEN)
    assert code == 400
    assert "not allowed" in answer["error"] and "allowed_transformers" in answer["error"]
    assert divert_status(sc, f"{name}-evil") == {}
    time.sleep(0.2)
    assert "refused: transformer 'antigravity:geohash' is not allowed" in sc.log()
    allowed = dict(refused, name=f"{name}-ok", transformer="tests.divert.transformers:tag")
    code, answer = http(sc, "POST", "/diverts", allowed, TOKEN)
    assert code == 201, answer
    assert divert_status(sc, f"{name}-ok")["transformer"] == "tests.divert.transformers:tag"


def test_without_an_allow_list_no_runtime_divert_may_name_a_transformer(run_config, managed,
                                                                        objects):
    name = managed("allow-none")
    target = objects.queue(f"{name}.target")
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    body = {"name": f"{name}-t", "address": name, "forwarding_address": target,
            "routing_type": "ANYCAST", "transformer": "code:interact"}
    code, answer = http(sc, "POST", "/diverts", body, TOKEN)
    assert code == 400 and "not allowed" in answer["error"]
    assert sc.proc.poll() is None  # and nothing blocks: the sidecar still answers
    assert sc.status()["healthy"]


def test_config_file_diverts_may_still_name_any_transformer(run_config, managed, objects):
    name = managed("allow-file")
    target = objects.queue(f"{name}.target")
    sc = run_config([{"name": name, "kind": "topic"}],
                    [{"name": f"{name}-t", "address": name, "forwarding_address": target,
                      "routing_type": "ANYCAST",
                      "transformer": "tests.divert.transformers:tag"}])
    assert divert_status(sc, f"{name}-t")["origin"] == "config"


def test_a_stored_divert_naming_a_transformer_not_allowed_is_not_loaded(run_config, managed,
                                                                       objects, mgmt):
    name = managed("allow-stored")
    target = objects.queue(f"{name}.target")
    parameter = "rtroute.diverts./"
    mgmt.delete_global_parameter(parameter)
    mgmt.put_global_parameter(parameter, [
        {"name": f"{name}-evil", "address": name, "forwarding_address": target,
         "routing_type": "ANYCAST", "transformer": "antigravity:geohash"},
        {"name": f"{name}-fine", "address": name, "forwarding_address": target,
         "routing_type": "ANYCAST"}])
    try:
        sc = run_config([{"name": name, "kind": "topic"}],
                        http={"token": TOKEN, "persist_diverts": True})
        assert divert_status(sc, f"{name}-fine")["origin"] == "http"
        assert divert_status(sc, f"{name}-evil") == {}
        assert "transformer 'antigravity:geohash' is not allowed" in sc.log()
    finally:
        mgmt.delete_global_parameter(parameter)
