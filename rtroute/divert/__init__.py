"""Diverts, as ActiveMQ Artemis has them: move or copy messages between addresses. Pure logic.

A divert watches a managed exchange (or a topic pattern over their names), and for each message
its filter matches sends a copy to its forwarding address(es); an exclusive divert takes the
message away from its address. The sidecar runs diverts as a stage in front of the routing of
each managed exchange (:mod:`rtroute.sidecar.service`); this package decides, the sidecar
publishes::

    from rtroute.divert import DivertTable, Message, make_copy

    table = DivertTable(["prices"])
    table.add(divert_config)                       # a rtroute.config.divert.DivertConfig
    verdict = table.evaluate("prices", headers)    # .fired diverts, .original goes on?
    for d in verdict.fired:
        for address in d.forwarding_addresses:
            copy = make_copy(original, d, address, "prices", max_hops=16,
                             transformer=d.transformer)

- :mod:`rtroute.divert.table`: which diverts fire (exclusive first, routing-name turns).
- :mod:`rtroute.divert.copies`: the copy's headers (``_AMQ_ORIG_*``), routing types on RabbitMQ.
- :mod:`rtroute.divert.message`: the :class:`Message` a transformer takes and returns.
- :mod:`rtroute.routing.divert_graph`: watched exchanges and the cycle check.
- :mod:`rtroute.config.divert`: a ``[[divert]]`` table or an HTTP API body, validated (not
  imported here: it needs the config reader).
"""
from rtroute.divert.copies import (
    ANYCAST,
    HDR_ORIG_MESSAGE_ID,
    HDR_ORIG_ROUTING_TYPE,
    HDR_ORIGINAL_ADDRESS,
    HDR_ORIGINAL_QUEUE,
    HDR_ROUTING_TYPE,
    HOPS_HEADER,
    MULTICAST,
    Copy,
    copy_message_id,
    hops_of,
    make_copy,
    original_routing_type,
    publish_fields,
    resolve_target,
    routing_type_of,
)
from rtroute.divert.message import (
    PROPERTY_NAMES,
    Message,
    Transformer,
    TransformerError,
    load_transformer,
)
from rtroute.divert.table import (
    ROUTING_TYPES,
    Divert,
    DivertError,
    DivertExists,
    DivertTable,
    Verdict,
)
from rtroute.routing.divert_graph import DivertCycle, address_matches, find_cycle, watched_exchanges

__all__ = [
    "ANYCAST",
    "HDR_ORIGINAL_ADDRESS",
    "HDR_ORIGINAL_QUEUE",
    "HDR_ORIG_MESSAGE_ID",
    "HDR_ORIG_ROUTING_TYPE",
    "HDR_ROUTING_TYPE",
    "HOPS_HEADER",
    "MULTICAST",
    "PROPERTY_NAMES",
    "ROUTING_TYPES",
    "Copy",
    "Divert",
    "DivertCycle",
    "DivertError",
    "DivertExists",
    "DivertTable",
    "Message",
    "Transformer",
    "TransformerError",
    "Verdict",
    "address_matches",
    "copy_message_id",
    "find_cycle",
    "hops_of",
    "load_transformer",
    "make_copy",
    "original_routing_type",
    "publish_fields",
    "resolve_target",
    "routing_type_of",
    "watched_exchanges",
]
