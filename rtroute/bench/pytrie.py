"""Benchmark baseline: a pure-Python dict-of-dicts trie with a reversed twin (not used by rtroute).

What a careful Python programmer would write for reverse-topic matching; the native core must
beat it by 10x on every wildcard shape.
"""
from __future__ import annotations

END = object()  # marks a node that ends a binding key; value is the key


class DictTrie:
    """Concrete binding keys; queries with ``*`` and ``#``; a reversed twin for suffix anchors."""

    def __init__(self) -> None:
        self.fwd: dict = {}
        self.rev: dict = {}

    def add(self, key: str) -> None:
        words = key.split(".") if key else []
        for root, seq in ((self.fwd, words), (self.rev, words[::-1])):
            node = root
            for w in seq:
                node = node.setdefault(w, {})
            node[END] = key

    def match(self, query: str) -> list[str]:
        q = query.split(".") if query else []
        lead = next((i for i, w in enumerate(q) if w in ("*", "#")), len(q))
        trail = next((i for i, w in enumerate(reversed(q)) if w in ("*", "#")), len(q))
        root, q = (self.rev, q[::-1]) if trail > lead else (self.fwd, q)
        out: dict = {}
        self._walk(root, q, 0, out)
        return list(out)

    def match_many(self, queries: list[str]) -> list[list[str]]:
        """:meth:`match` for each query: the core's batch API, so that the Spark job's batch
        pipeline can run on this trie (the Spark benchmark's baselines)."""
        match = self.match
        return [match(q) for q in queries]

    def _walk(self, node: dict, q: list, i: int, out: dict) -> None:
        if i == len(q):
            if END in node:
                out[node[END]] = None
            return
        w = q[i]
        if w == "#":
            self._walk(node, q, i + 1, out)
            for child_word, child in node.items():
                if child_word is not END:
                    self._walk(child, q, i, out)
        elif w == "*":
            for child_word, child in node.items():
                if child_word is not END:
                    self._walk(child, q, i + 1, out)
        else:
            child = node.get(w)
            if child is not None:
                self._walk(child, q, i + 1, out)
