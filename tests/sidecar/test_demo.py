"""The README's main-job command works: the plugin's example through a real sidecar."""
import pytest

from rtroute.demo import run

pytestmark = pytest.mark.broker


def test_demo_delivers_the_plugin_readme_example(broker_uri, management_uri):
    lines = []
    received = run(broker_uri, echo=lines.append, management_uri=management_uri)
    got = {q: sorted(keys) for q, keys in received.items()}
    assert got["A"] == sorted(["server1.app1.mod1.info", "*.app1.mod1.info", "#.info",
                               "#.mod1.info", "#", "server1.app1.mod1.*", "server1.app1.#",
                               "server1.app1.mod1.info (CC)"])
    assert got["B"] == sorted(["#", "server1.app1.mod1.*", "server1.app1.#"])
    assert got["C"] == sorted(["#.info", "#.mod1.info", "#", "server1.app1.mod1.info (CC)"])
    assert got["D"] == sorted(["#", "server1.app1.mod1.info (CC)"])
    assert got["E"] == sorted(["#.info", "#", "server1.app1.#"])
    assert got["F"] == sorted(["*.app1.mod1.info", "#.info", "#.mod1.info", "#"])
    assert any("A, F" in line for line in lines)
