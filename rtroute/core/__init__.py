"""The matching core: the native extension, or its pure-Python twin as a fallback.

``RTROUTE_PURE=1`` selects the twin (:mod:`rtroute.core.reference`) even when the extension is
built; ``IMPLEMENTATION`` says which one is in use ("native" or "reference").
"""
import os

from rtroute.core.keys import MAX_BINDING_BYTES, MAX_QUERY_BYTES, split_words

if os.environ.get("RTROUTE_PURE") == "1":
    from rtroute.core.reference import ForwardMatcher, ReverseMatcher

    IMPLEMENTATION = "reference"
else:
    try:
        from rtroute.core._native import ForwardMatcher, ReverseMatcher

        IMPLEMENTATION = "native"
    except ImportError:
        from rtroute.core.reference import ForwardMatcher, ReverseMatcher

        IMPLEMENTATION = "reference"

__all__ = [
    "IMPLEMENTATION",
    "MAX_BINDING_BYTES",
    "MAX_QUERY_BYTES",
    "ForwardMatcher",
    "ReverseMatcher",
    "split_words",
]
