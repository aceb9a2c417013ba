"""A bindings listing of the management API that takes longer than the fixed per-request
timeout still completes, says how far it is while it runs, and fails with a clear error when it
really does not come (issue #47: at 300,000 bindings the broker takes 10-13 s to answer, and the
client gave up after a fixed 10 s).

The API here is a local HTTP server that answers like RabbitMQ (the whole JSON array, with its
``Content-Length``, after the broker built it); its delays are scaled down: the client's
per-request ``timeout`` stands for the old fixed 10 s, and each test shows that a plain request
with that timeout fails where the listing completes."""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rtroute.amqp import management_listing
from rtroute.amqp.management import ManagementClient, ManagementError
from rtroute.amqp.management_listing import ListingBudget, ListingProgress
from rtroute.ops.netaddr import free_port

from ..conftest import wait_for

PATH = "exchanges/%2F/x.bindings/bindings/source"


def rows(count: int) -> list[dict]:
    """``count`` binding rows as RabbitMQ lists them."""
    return [{"source": "x.bindings", "vhost": "/", "destination": f"q{i % 100}",
             "destination_type": "queue", "routing_key": f"a.b{i}.c.d", "arguments": {},
             "properties_key": f"a.b{i}.c.d"} for i in range(count)]


class SlowAPI:
    """A management API whose bindings listing answers after ``delay`` seconds (headers and
    all: RabbitMQ builds the answer whole first), then sends the body in pieces; ``hold``
    (an Event), if given, is awaited after the first half of the body."""

    def __init__(self, count: int, delay: float) -> None:
        self.body = json.dumps(rows(count)).encode()
        self.delay = delay
        self.hold: threading.Event | None = None
        self.stopping = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.endswith("/bindings/source"):
                    api.stopping.wait(api.delay)  # the broker builds its answer
                    body = api.body
                else:
                    body = b'{"name": "x.bindings"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                half = len(body) // 2
                self.wfile.write(body[:half])
                self.wfile.flush()
                if api.hold is not None and body is api.body:
                    api.hold.wait(30)
                self.wfile.write(body[half:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slow_api() -> Iterator:
    started: list[SlowAPI] = []

    def start(count: int, delay: float) -> SlowAPI:
        api = SlowAPI(count, delay)
        started.append(api)
        return api

    yield start
    for api in started:
        api.close()


def test_a_listing_slower_than_the_request_timeout_completes(slow_api):
    api = slow_api(2000, delay=1.5)
    # 0.5 s stands for the old fixed 10 s: a plain request of the same path fails with it
    client = ManagementClient(api.url, timeout=0.5)
    with pytest.raises(ManagementError, match="timed out"):
        client.request("GET", PATH)
    listed = client.exchange_bindings("x.bindings")
    assert len(listed) == 2000
    assert listed[7].routing_key == "a.b7.c.d"
    # the next listing of the same exchange may wait at least 3 times as long as this one took
    assert client.listings.wait(PATH) >= management_listing.LISTING_TIMEOUT


def test_the_progress_counts_the_rows_read_while_the_body_comes(slow_api):
    api = slow_api(5000, delay=0.0)
    api.hold = threading.Event()
    client = ManagementClient(api.url, timeout=5.0)
    progress = ListingProgress("bindings of 'x.bindings'", expected=4000)
    done: list = []
    thread = threading.Thread(target=lambda: done.append(
        client.exchange_bindings("x.bindings", progress=progress)))
    thread.start()
    try:
        wait_for(lambda: progress.phase == "reading" and progress.rows >= 2000, timeout=10)
        line = progress.describe()
        # about half of the 5,000 rows read; the total estimated from Content-Length
        assert progress.rows < 5000
        assert line.startswith(f"bindings of 'x.bindings': {progress.rows:,} of ~"), line
        assert 4500 <= progress.estimate() <= 5500
    finally:
        api.hold.set()
        thread.join(10)
    assert len(done[0]) == 5000
    assert (progress.phase, progress.total, progress.rows) == ("done", 5000, 5000)


def test_a_long_listing_logs_a_progress_line_every_few_seconds(slow_api, caplog, monkeypatch):
    monkeypatch.setattr(management_listing, "LOG_EVERY", 0.2)
    api = slow_api(100, delay=1.0)
    client = ManagementClient(api.url)
    with caplog.at_level(logging.INFO, logger="rtroute.amqp.management"):
        client.exchange_bindings("x.bindings")
    lines = [r.getMessage() for r in caplog.records if r.name == "rtroute.amqp.management"]
    assert any(line.startswith("listing bindings of 'x.bindings': waiting ") and
               "management API's answer" in line for line in lines), lines


def test_a_listing_that_does_not_come_fails_clearly_and_the_next_waits_longer(slow_api):
    api = slow_api(10, delay=3.0)
    url = api.url.replace("http://", "http://guest:s3cret-pw@")
    client = ManagementClient(url, listing_timeout=0.3)
    progress = ListingProgress("bindings of 'x.bindings'")
    with pytest.raises(ManagementError) as caught:
        client.exchange_bindings("x.bindings", progress=progress)
    message = str(caught.value)
    assert "the listing timed out" in message and "within 0.3 s" in message, message
    assert "the next try waits 0.6 s" in message, message
    assert "s3cret-pw" not in message
    assert progress.phase == "failed" and progress.error == message
    assert client.listings.wait(PATH) == pytest.approx(0.6)


def test_a_listing_fails_over_to_the_next_url(slow_api):
    api = slow_api(300, delay=0.8)
    down = f"http://127.0.0.1:{free_port()}/"
    client = ManagementClient([down, api.url], timeout=0.3)
    assert len(client.exchange_bindings("x.bindings")) == 300
    assert client.base_url == api.url + "api/"


def test_the_budget_grows_with_the_work_and_doubles_after_a_timeout():
    budget = ListingBudget(60.0)
    assert budget.wait("a") == 60.0
    budget.succeeded("a", 30.0)  # took 30 s: the next may take 90
    assert budget.wait("a") == 90.0
    assert budget.wait("b") == 60.0  # another exchange's listing is apart
    assert budget.timed_out("a") == 180.0
    for _ in range(10):
        budget.timed_out("a")
    assert budget.wait("a") == management_listing.MAX_LISTING_TIMEOUT
    budget.succeeded("a", 1.0)  # a quick one: back to the floor
    assert budget.wait("a") == 60.0
    with pytest.raises(ValueError, match="listing timeout must be > 0 s"):
        ListingBudget(0)


def test_progress_lines_say_the_phase_and_how_far():
    progress = ListingProgress("bindings of 'x'", expected=300_000)
    assert "waiting" in progress.describe() and "~300,000 expected" in progress.describe()
    progress.phase, progress.length, progress.bytes_read, progress.rows = \
        "reading", 1000, 400, 120_000
    assert progress.describe().startswith("bindings of 'x': 120,000 of ~300,000 read")
    progress.total, progress.phase, progress.rows = 300_000, "applying", 1000
    assert progress.describe().startswith("bindings of 'x': 1,000 of 300,000 applied")
    progress.finish("boom")
    assert progress.describe().endswith(": boom")
