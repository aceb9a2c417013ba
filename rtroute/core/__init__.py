"""The matching core: the native extension, or its pure-Python twin as a fallback.

``RTROUTE_PURE=1`` selects the twin (:mod:`rtroute.core.reference`) even when the extension is
built; ``IMPLEMENTATION`` says which one is in use ("native" or "reference") and
``FALLBACK_REASON`` why the twin is (``None`` with the native core). The twin gives the same
answers by a linear scan (measured ~400x slower than the native core at 100 bindings, ~3,000x at
1,000): :func:`warn_if_fallback` says so in a long-running process's log.
"""
from __future__ import annotations

import logging
import os

from rtroute.core.keys import MAX_BINDING_BYTES, MAX_QUERY_BYTES, split_words

FALLBACK_REASON: str | None
_NATIVE_MISSING = False
if os.environ.get("RTROUTE_PURE") == "1":
    from rtroute.core.reference import ForwardMatcher, ReverseMatcher, RTopicTable

    IMPLEMENTATION = "reference"
    FALLBACK_REASON = "RTROUTE_PURE=1 is set"
else:
    try:
        from rtroute.core._native import ForwardMatcher, ReverseMatcher, RTopicTable

        IMPLEMENTATION = "native"
        FALLBACK_REASON = None
    except ImportError as exc:  # not built (no compiler or Cython at install), or unloadable
        from rtroute.core.reference import ForwardMatcher, ReverseMatcher, RTopicTable

        IMPLEMENTATION = "reference"
        FALLBACK_REASON = f"the native extension cannot be imported ({exc})"
        _NATIVE_MISSING = True


def warn_if_fallback(logger: logging.Logger | None = None) -> bool:
    """Log a warning when the pure-Python twin is in use instead of the native core.

    Args:
        logger: where to log (default: this module's logger, ``rtroute.core``).

    Returns:
        True when the twin is in use (and the warning was logged), False with the native core.
    """
    if FALLBACK_REASON is None:
        return False
    advice = ("; reinstall rtroute where a C compiler is available (RTROUTE_REQUIRE_NATIVE=1 "
              "makes a missing native core an install error)" if _NATIVE_MISSING else "")
    (logger or logging.getLogger(__name__)).warning(
        "using the pure-Python matching core, a linear scan orders of magnitude slower than the "
        "native one with many bindings: %s%s", FALLBACK_REASON, advice)
    return True


__all__ = [
    "FALLBACK_REASON",
    "IMPLEMENTATION",
    "MAX_BINDING_BYTES",
    "MAX_QUERY_BYTES",
    "ForwardMatcher",
    "RTopicTable",
    "ReverseMatcher",
    "split_words",
    "warn_if_fallback",
]
