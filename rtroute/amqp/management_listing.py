"""Reading one long listing of RabbitMQ's management API: how long to wait, and how far it is.

RabbitMQ does not page a bindings listing (``GET /api/exchanges/VHOST/NAME/bindings/source``
takes no ``page``/``page_size``: the handler, ``rabbit_mgmt_wm_bindings``, builds the list of
every binding, encodes it as one JSON array and sends it with its ``Content-Length``). So the
wait is first for the broker to build the whole answer (no byte comes meanwhile: measured 10-13 s
for 300,000 bindings on a busy 2-core machine), then for the body (54 MB for 300,000), then for
the parse. A fixed per-request timeout does not fit that; :class:`ListingBudget` gives each
listing a wait that grows with the work (the last listing's duration, doubled after a timeout),
and :func:`read_listing` reads the body in chunks, counting rows as they come, so that
:class:`ListingProgress` can say how far a listing is (``/readyz``, the proxy's waiting clients,
a log line every :data:`LOG_EVERY` seconds).
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["LISTING_TIMEOUT", "LOG_EVERY", "MAX_LISTING_TIMEOUT", "ListingBudget",
           "ListingProgress", "array_items", "json_rows", "log_progress", "read_listing",
           "skip_space"]

LOG = logging.getLogger("rtroute.amqp.management")

# seconds a listing waits for the broker's answer (and for each read of its body) at first
LISTING_TIMEOUT = 60.0
# the most any listing waits, however it grew
MAX_LISTING_TIMEOUT = 600.0
# a listing's wait is at least this many times the previous one's duration
GROWTH = 3.0
# seconds between two progress lines of one long listing in the log
LOG_EVERY = 5.0
# one binding row of the listing has this key once (counted to know how many rows are read)
ROW_MARKER = b'"properties_key":'
CHUNK = 1 << 20


class ListingProgress:
    """How far one listing is. The listing's thread writes it; any thread may read it.

    Attributes:
        what: what is listed, for messages (``"bindings of 'logs.bindings'"``).
        expected: rows expected (the previous listing's count), or None.
        phase: ``"asking"`` (the broker builds its answer), ``"reading"``, ``"parsing"``,
            ``"applying"`` (the caller applies the rows), ``"done"`` or ``"failed"``.
        bytes_read, length: bytes of the body read so far, and its ``Content-Length``.
        rows: rows read so far (then applied, in ``"applying"``); total: rows in the answer.
        error: why the listing failed (``"failed"``).
    """

    __slots__ = ("bytes_read", "error", "expected", "finished", "length", "phase", "rows",
                 "started", "total", "what")

    def __init__(self, what: str, expected: int | None = None) -> None:
        self.what = what
        self.expected = expected
        self.started = time.monotonic()
        self.phase = "asking"
        self.bytes_read = 0
        self.length: int | None = None
        self.rows = 0
        self.total: int | None = None
        self.error: str | None = None
        self.finished = threading.Event()

    def elapsed(self) -> float:
        """Seconds since the listing started."""
        return time.monotonic() - self.started

    def estimate(self) -> int | None:
        """The rows the answer will have: exact once parsed, else from the bytes read so far
        against ``Content-Length``, else the previous listing's count."""
        if self.total is not None:
            return self.total
        if self.length and self.bytes_read and self.rows:
            return round(self.rows * self.length / self.bytes_read)
        return self.expected

    def describe(self) -> str:
        """One line: ``"bindings of 'x': 120,000 of ~300,000 read (14 s)"`` and the like."""
        estimate = self.estimate()
        of = "" if estimate is None else \
            f" of {'' if self.total is not None else '~'}{estimate:,}"
        seconds = f"{self.elapsed():.0f} s"
        if self.phase == "asking":
            expected = "" if self.expected is None else f", ~{self.expected:,} expected"
            return (f"{self.what}: waiting {seconds} for the management API's answer (the "
                    f"broker builds it whole before it sends it{expected})")
        if self.phase == "reading":
            return f"{self.what}: {self.rows:,}{of} read ({seconds})"
        if self.phase == "parsing":
            return f"{self.what}: {self.bytes_read:,} bytes read, parsing ({seconds})"
        if self.phase == "applying":
            return f"{self.what}: {self.rows:,}{of} applied ({seconds})"
        if self.phase == "failed":
            return f"{self.what}: failed after {seconds}: {self.error}"
        return f"{self.what}: {self.total or 0:,} listed in {seconds}"

    def finish(self, error: str | None = None) -> None:
        """The listing ended (``error``: it failed)."""
        self.phase = "done" if error is None else "failed"
        self.error = error
        self.finished.set()


class ListingBudget:
    """How long each listing may wait (per path: one exchange's listing grows apart from
    another's).

    A listing first waits ``timeout`` seconds (for the broker's first byte, and for each read
    after it: the socket timeout of urllib applies to each blocking read); after a listing of
    the same path took ``T`` s, the next waits at least ``GROWTH * T``; after one timed out, the
    next waits twice as long; never more than :data:`MAX_LISTING_TIMEOUT`.
    """

    def __init__(self, timeout: float = LISTING_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError(f"listing timeout must be > 0 s, got {timeout!r}")
        self.timeout = timeout
        self._waits: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, path: str) -> float:
        """Seconds the next listing of ``path`` may wait."""
        with self._lock:
            return self._waits.get(path, self.timeout)

    def succeeded(self, path: str, seconds: float) -> None:
        """A listing of ``path`` took ``seconds``."""
        with self._lock:
            self._waits[path] = min(MAX_LISTING_TIMEOUT, max(self.timeout, GROWTH * seconds))

    def timed_out(self, path: str) -> float:
        """A listing of ``path`` timed out: returns the next one's (doubled) wait."""
        with self._lock:
            wait = min(MAX_LISTING_TIMEOUT, 2 * self._waits.get(path, self.timeout))
            self._waits[path] = wait
            return wait


def read_listing(response: Any, progress: ListingProgress) -> bytes:
    """The body of ``response`` (an HTTP response whose headers came), read in chunks while
    ``progress`` counts the bytes and rows; a line in the log every :data:`LOG_EVERY` s."""
    length = response.headers.get("Content-Length")
    progress.length = int(length) if length is not None and length.isdigit() else None
    progress.phase = "reading"
    parts: list[bytes] = []
    tail = b""
    keep = len(ROW_MARKER) - 1
    # read1: what has come, up to CHUNK (read(CHUNK) would wait for all of a chunk)
    read = getattr(response, "read1", response.read)
    while True:
        data = read(CHUNK)
        if not data:
            break
        parts.append(data)
        # a marker cut in two by the chunk boundary is counted once, in the seam
        progress.rows += (tail + data[:keep]).count(ROW_MARKER) + data.count(ROW_MARKER)
        tail = data[-keep:]
        progress.bytes_read += len(data)
    progress.phase = "parsing"
    return b"".join(parts)


_SPACE = re.compile(r"[ \t\n\r]*")


def skip_space(text: str, at: int) -> int:
    """Where the JSON text ``text`` goes on after the white space at ``at``."""
    match = _SPACE.match(text, at)
    return at if match is None else match.end()


def array_items(text: str, at: int) -> Iterator[tuple[Any, int]]:
    """The items of the JSON array that begins at ``at`` of ``text``, one at a time, each with
    where the text goes on after it (after the array's ``]`` once the last was given).

    Raises:
        ValueError: no JSON array begins at ``at``.
    """
    decode = _DECODER.raw_decode
    if text[at:at + 1] != "[":
        raise ValueError(f"not a JSON array at {at}")
    at = skip_space(text, at + 1)
    if text[at:at + 1] == "]":
        return
    while True:
        item, at = decode(text, at)
        at = skip_space(text, at)
        mark = text[at:at + 1]
        if mark == "]":
            yield item, at + 1
            return
        if mark != ",":
            raise ValueError(f"expected ',' or ']' at {at}")
        at = skip_space(text, at + 1)
        yield item, at


def json_rows(payload: bytes) -> Iterator[Any]:
    """The items of a JSON array, one at a time, as they are iterated: a listing of 100,000s
    of rows never exists as one list of parsed rows (only as its text).

    Raises:
        ValueError: ``payload`` is not a JSON array.
    """
    text = payload.decode("utf-8")
    at = skip_space(text, 0)
    if text[at:at + 1] != "[":
        raise ValueError("not a JSON array")
    for item, _at in array_items(text, at):
        yield item


_DECODER = json.JSONDecoder()


# the listings running now, and the one thread that logs them (while there are any): a
# proxy that checks thousands of registrations lists thousands of small exchanges
_RUNNING: dict[ListingProgress, float] = {}  # -> when it was last logged
_RUNNING_LOCK = threading.Lock()
_reporter: threading.Thread | None = None


def log_progress(progress: ListingProgress) -> None:
    """Logs ``progress`` every :data:`LOG_EVERY` s until it is finished; a listing done
    within that time logs nothing."""
    global _reporter
    with _RUNNING_LOCK:
        _RUNNING[progress] = progress.started
        if _reporter is None:
            _reporter = threading.Thread(target=_report, name="rtroute-listing-progress",
                                         daemon=True)
            _reporter.start()


def _report() -> None:
    global _reporter
    while True:
        time.sleep(min(1.0, LOG_EVERY / 2))
        now = time.monotonic()
        due = []
        with _RUNNING_LOCK:
            for progress, logged in list(_RUNNING.items()):
                if progress.finished.is_set():
                    del _RUNNING[progress]
                elif now - logged >= LOG_EVERY:
                    _RUNNING[progress] = now
                    due.append(progress)
            if not _RUNNING and not due:
                _reporter = None
                return
        for progress in due:
            LOG.info("listing %s", progress.describe())
