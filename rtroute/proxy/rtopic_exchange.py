"""One x-rtopic exchange as a proxy knows it: its binding table (an
:class:`~rtroute.routing.exchange_router.ExchangeRouter`), whether that table is known yet, and
the caches of rewritten frames and routing decisions that every binding change empties. It
lives in the proxy's asyncio loop (:mod:`rtroute.proxy.catalog` keeps one per exchange)."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from rtroute.amqp.content_header import bcc_entry
from rtroute.routing.exchange_router import ExchangeRouter
from rtroute.routing.rtopic_layout import BINDINGS_SUFFIX

__all__ = ["RTopic"]


class RTopic:
    """One x-rtopic exchange as a proxy knows it (loop thread)."""

    __slots__ = ("bcc_entries", "bindings_short", "changed", "name", "planned", "ready",
                 "rewritten", "router", "wire_bindings", "wire_name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.wire_name = name.encode("utf-8")
        self.wire_bindings = (name + BINDINGS_SUFFIX).encode("utf-8")
        self.bindings_short = bytes((len(self.wire_bindings),)) + self.wire_bindings
        self.router = ExchangeRouter(name, "rtopic")
        self.ready = asyncio.Event()
        # a client's basic.publish frame and content header frame, for messages without
        # headers -> (the pair rewritten, the least frame_max its header frame needs, its
        # cost); emptied by every binding change
        self.rewritten: dict[bytes, tuple[bytes, int, int]] = {}
        # (routing key, frame_max, CC, BCC, the alias header) -> the BCC of its one publish
        # (or the router's decision when it is not that; the general path's keys start with
        # None), for messages whose other headers differ (amqplib sends a table with every
        # message): a wildcard over thousands of bindings is planned once, not per message;
        # emptied by every binding change too
        self.planned: dict[tuple, Any] = {}
        # a planned BCC list -> its encoded header entry (the same few plans repeat)
        self.bcc_entries: dict[tuple[str, ...], bytes] = {}
        self.changed: float | None = None  # time.time() of the last change (or re-listing)

    def bcc_entry(self, keys: tuple[str, ...]) -> bytes:
        """The encoded ``BCC`` header entry holding ``keys`` (cached until a binding change)."""
        entry = self.bcc_entries.get(keys)
        if entry is None:
            if len(self.bcc_entries) >= 4096:
                self.bcc_entries.clear()
            entry = self.bcc_entries[keys] = bcc_entry(keys)
        return entry

    def keep_plan(self, plan_key: tuple, plan: Any) -> None:
        """Caches ``plan`` (a ``BCC`` tuple or a decision) under ``plan_key`` until a binding
        change (at most 4,096 entries: then it starts over)."""
        if len(self.planned) >= 4096:
            self.planned.clear()
        self.planned[plan_key] = plan

    def forget_rewrites(self) -> None:
        """The binding table changed (or may have): no rewrite or plan made before holds."""
        self.rewritten.clear()
        self.planned.clear()
        self.bcc_entries.clear()
        self.changed = time.time()

    def bind(self, destination: tuple[str, str], key: str, added: bool) -> None:
        self.forget_rewrites()
        if added:
            self.router.bind(destination, key)
        else:
            self.router.unbind(destination, key)
