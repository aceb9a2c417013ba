"""One local SparkSession for the whole directory (it takes seconds to start), and test data."""
from __future__ import annotations

import json
import os
import random
import sys
import uuid

import pytest

from rtroute.sidecar.demo import PLUGIN_QUEUES

from ..conftest import BROKER_URI, stream_uri_for_test

if os.environ.get("RTROUTE_REQUIRE_SPARK") != "1":  # the test command sets it: fail, not skip
    pytest.importorskip("pyspark", reason="pip install 'rtroute[spark]'")
    pytest.importorskip("pyarrow", reason="pip install 'rtroute[spark]'")

@pytest.fixture(scope="session", autouse=True)
def stream_protocol_reader():
    """The stream source reads over the stream protocol of the broker under test (the
    source's RTROUTE_STREAM_URI), unless RTROUTE_TEST_STREAM_URI=off."""
    uri = stream_uri_for_test(BROKER_URI)
    if uri and "RTROUTE_STREAM_URI" not in os.environ:
        os.environ["RTROUTE_STREAM_URI"] = uri
        yield uri
        os.environ.pop("RTROUTE_STREAM_URI", None)
    else:
        yield os.environ.get("RTROUTE_STREAM_URI")


PLUGIN = PLUGIN_QUEUES  # the plugin README's queues A-F and their binding keys


@pytest.fixture(scope="session")
def spark():
    """A ``local[1]`` session: one executor Python worker, so matcher builds are countable."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[1]").appName("rtroute-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def plugin_bindings() -> list[tuple[str, str]]:
    """The rtopic plugin's README example, plus a destination bound by two keys."""
    return sorted(PLUGIN.items()) + [("G", "server1.app1.mod1.error"),
                                     ("G", "server2.app2.mod1.warning")]


def random_messages(n: int, seed: int = 7) -> list[dict]:
    """Messages over the plugin's words: concrete and wildcard keys, CC/BCC, no headers,
    other headers, unroutable keys. Headers are JSON text, as the archive stores them."""
    rnd = random.Random(seed)
    levels = [["server1", "server2", "server3"], ["app1", "app2"], ["mod1", "mod2"],
              ["info", "error", "warning"]]

    def key() -> str:
        words = [rnd.choice(level) for level in levels]
        for i in range(len(words)):
            if rnd.random() < 0.15:
                words[i] = "*"
        if rnd.random() < 0.1:
            words = ["#"] + words[rnd.randint(1, 3):]
        if rnd.random() < 0.05:
            words = words[: rnd.randint(0, 3)] + ["#"]
        return ".".join(words)

    out = []
    for i in range(n):
        headers: dict | None = None
        roll = rnd.random()
        if roll < 0.2:
            headers = {"CC": [key() for _ in range(rnd.randint(0, 2))]}
        elif roll < 0.35:
            headers = {"BCC": [key()], "x-trace": f"t{i}"}
        elif roll < 0.45:
            headers = {"CC": [key(), 7], "BCC": [key(), {"a": 1}], "n": i}
        elif roll < 0.5:
            headers = {}
        out.append({"id": i, "routing_key": key(),
                    "headers": None if headers is None else json.dumps(headers)})
    return out


@pytest.fixture
def queue(broker_uri):
    """A fresh durable queue, deleted afterwards."""
    from rtroute.amqp import connect_blocking

    name = f"rtroute-test.spark-drain.{uuid.uuid4().hex[:8]}"
    connection = connect_blocking(broker_uri)
    connection.channel().queue_declare(name, durable=True)
    yield name
    connection.channel().queue_delete(name)
    connection.close()
