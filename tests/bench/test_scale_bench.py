"""`rtroute bench scale`: the topology it imports, its options, and a small run's report (the
proxy and the sidecar each route their first publish, /readyz 200 by then, RSS known)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from rtroute.bench.report import read_report
from rtroute.bench.scale import definitions, first_key
from rtroute.cli import main
from rtroute.routing.rtopic_layout import LAYOUT_ARGUMENT, REGISTRY_EXCHANGE


def test_the_definitions_hold_the_proxy_layout_and_n_bindings_over_the_queues():
    defs = definitions("x", 1000, 10, "direct")
    kinds = {x["name"]: (x["type"], x["arguments"]) for x in defs["exchanges"]}
    assert kinds["x"] == ("fanout", {LAYOUT_ARGUMENT: "rtopic"})
    assert kinds["x.bindings"][0] == "direct" and kinds[REGISTRY_EXCHANGE][0] == "direct"
    assert [q["name"] for q in defs["queues"]] == [f"x.q{i}" for i in range(10)]
    registration, *bindings = defs["bindings"]
    assert (registration["source"], registration["destination"], registration["routing_key"]) \
        == (REGISTRY_EXCHANGE, "x.bindings", "x")
    assert len(bindings) == 1000 and len({b["routing_key"] for b in bindings}) == 1000
    assert all(len(b["routing_key"].split(".")) == 4 for b in bindings)
    assert (bindings[0]["routing_key"], bindings[0]["destination"]) == (first_key(), "x.q0")
    assert {b["destination"] for b in bindings} == {f"x.q{i}" for i in range(10)}


@pytest.mark.parametrize("sizes", ["", "10,x", "0", "-5"])
def test_bindings_must_be_whole_numbers_of_at_least_one(sizes):
    result = CliRunner().invoke(main, ["bench", "scale", "--bindings", sizes])
    assert result.exit_code == 2
    assert "--bindings" in result.output and "N,N,..." in result.output


def test_a_small_run_reports_start_to_first_route_and_rss(tmp_path, broker_uri,
                                                          management_uri):
    path = tmp_path / "scale.json"
    result = CliRunner().invoke(main, [
        "bench", "scale", "--uri", broker_uri, "--management-uri", management_uri,
        "--bindings", "200", "--queues", "5", "--timeout", "60", "--idle", "1",
        "--json", str(path)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = read_report(path)
    assert report["benchmark"] == "scale"
    rows = {r["name"]: r for r in report["rows"]}
    for who in ("proxy", "sidecar"):
        first = rows[f"{who}, 200 bindings: start to first route"]
        assert first["unit"] == "s" and 0 < first["value"] < 60, first
        assert first["ready_s"] is not None, first  # /readyz said 200 once it routed
        assert rows[f"{who}, 200 bindings: RSS at first route"]["value"] > 10
        idle = rows.get(f"{who}, 200 bindings: idle broker CPU")  # a broker on this machine
        assert idle is None or (idle["unit"] == "cores" and idle["value"] >= 0), idle


def test_a_vhost_that_does_not_exist_is_made_for_the_run_and_the_user_may_use_it(
        broker_uri, management_uri):
    import urllib.parse
    import uuid

    import pika

    from rtroute.amqp import connect_blocking
    from rtroute.amqp.management import ManagementClient, NotFound
    from rtroute.bench.scale import _ensure_vhost

    api = ManagementClient.from_amqp_uri(broker_uri, management_uri)
    vhost = f"rtroute-test-scale-{uuid.uuid4().hex[:6]}"
    user = pika.URLParameters(broker_uri).credentials.username
    said: list[str] = []
    try:
        assert _ensure_vhost(api, vhost, user, said.append) is True
        assert said and vhost in said[0] and "creating" in said[0]
        uri = broker_uri.rsplit("/", 1)[0] + "/" + urllib.parse.quote(vhost, safe="")
        with connect_blocking(uri) as conn:  # the user may open it and declare there
            conn.channel().exchange_declare("rtroute-test-scale", "fanout", auto_delete=True)
        assert _ensure_vhost(api, vhost, user, said.append) is False  # there: left alone
        assert len(said) == 1
    finally:
        try:
            api.request("DELETE", f"vhosts/{vhost}")
        except NotFound:
            pass
