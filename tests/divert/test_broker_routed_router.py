"""Decisions for managed topic/direct/fanout/headers exchanges (RabbitMQ routes), pure logic."""
from __future__ import annotations

from rtroute.config.rtroute_toml import BindingConfig
from rtroute.routing.exchange_router import BrokerRoutedRouter
from rtroute.sidecar.service import ExchangeSpec, declarations_for


def test_one_republish_with_the_key_and_headers_as_published():
    router = BrokerRoutedRouter("orders")
    (decision,) = router.decide_many([("a.*.c", {"CC": ["x.y"], "keep": 1})])
    assert decision.error is None and not decision.unroutable
    ((exchange, key, bcc),) = [(p.exchange, p.routing_key, p.bcc) for p in decision.publishes]
    assert (exchange, key, bcc) == ("orders.bindings", "a.*.c", None)
    assert decision.headers == {"CC": ["x.y"], "keep": 1}


def test_bcc_alias_becomes_a_real_bcc_on_the_republish():
    router = BrokerRoutedRouter("orders", bcc_alias="x-my-bcc")
    (decision,) = router.decide_many([("k", {"x-my-bcc": ["b1", 7, "b2"], "keep": 1})])
    assert decision.publishes[0].bcc == ("b1", "b2")  # non-strings ignored, as RabbitMQ does
    assert decision.headers == {"keep": 1}


def test_a_bad_alias_or_key_is_an_error_with_the_headers_as_published():
    router = BrokerRoutedRouter("orders")
    bad_alias, long_key = router.decide_many([("k", {"x-rtroute-bcc": "one"}),
                                              ("k" * 300, None)])
    assert "must be an array" in bad_alias.error
    assert bad_alias.headers == {"x-rtroute-bcc": "one"}
    assert long_key.error is not None and long_key.publishes == []


def test_bindings_exchange_is_a_real_exchange_of_the_kind_with_binding_arguments():
    spec = ExchangeSpec("h", kind="headers", bindings=[
        BindingConfig("q", "", "queue", {"x-match": "any", "a": 1})])
    decls = declarations_for(spec)
    bindings_ex = next(d for d in decls if d.get("exchange") == "h.bindings")
    assert bindings_ex["type"] == "headers"
    bind = next(d for d in decls if d["method"] == "queue.bind" and d["queue"] == "q")
    assert bind["arguments"] == {"x-match": "any", "a": 1}
    rtopic = declarations_for(ExchangeSpec("r"))
    assert next(d for d in rtopic if d.get("exchange") == "r.bindings")["type"] == "topic"
