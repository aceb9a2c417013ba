"""The pika releases rtroute is tested with.

rtroute reaches below pika's public API in a few places: :mod:`rtroute.amqp.socket_io` patches
the transport's send queue and read size, :mod:`rtroute.amqp.frames` replaces the connection's
data callback and reads its frame buffer, and the confirm window and the shovel worker build on
those two. pika may change any of that in any release, so the dependency is pinned to
:data:`TESTED` (``pika>=1.3,<1.5`` in pyproject.toml; keep the two equal) and importing
:mod:`rtroute.amqp.socket_io` with another pika (one installed with ``--no-deps``, say) warns
with :class:`UntestedPikaWarning`. What is actually missing is still refused outright, by the
feature checks of ``frames.install`` and ``socket_io.coalesce_io``.
"""
from __future__ import annotations

import re
import warnings

import pika

__all__ = ["TESTED", "UntestedPikaWarning", "untested_reason", "warn_if_untested"]

TESTED = ((1, 3), (1, 5))
"""pika >= TESTED[0] and < TESTED[1] (major, minor): tested by CI at both ends (1.3.0, 1.4.x)."""


class UntestedPikaWarning(RuntimeWarning):
    """The installed pika is outside the range rtroute was tested with."""


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "1.4.0b1" -> (1, 4, 0)."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


def untested_reason(version: str = pika.__version__) -> str | None:
    """Why rtroute is untested with pika ``version``, or None when it is inside :data:`TESTED`."""
    release = _release(version)
    (low_major, low_minor), (high_major, high_minor) = TESTED
    if release and (low_major, low_minor) <= release < (high_major, high_minor):
        return None
    tested = f">={low_major}.{low_minor},<{high_major}.{high_minor}"
    return (f"pika {version} is outside the range rtroute is tested with ({tested}); rtroute "
            "patches pika internals for its fast path and may fail or misbehave with it: "
            f"pip install 'pika{tested}'")


def warn_if_untested(version: str = pika.__version__) -> bool:
    """Warn (:class:`UntestedPikaWarning`) when pika ``version`` is outside :data:`TESTED`.

    Returns:
        True when it is (and the warning was issued).
    """
    reason = untested_reason(version)
    if reason is None:
        return False
    warnings.warn(reason, UntestedPikaWarning, stacklevel=2)
    return True
