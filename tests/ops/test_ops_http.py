"""The operations endpoint: health, status JSON, Prometheus metrics, token for non-loopback."""
import json
import urllib.error
import urllib.request

import pytest

from rtroute.netaddr import is_loopback, split_listen
from rtroute.ops_http import OpsServer, prometheus_text


def status():
    return {
        "healthy": True,
        "exchanges": [{"name": "logs", "state": "running"}],
        "metrics": {
            "rtroute_routed_total": {"help": "Messages routed", "type": "counter",
                                     "samples": [({"exchange": 'lo"gs'}, 3)]},
        },
    }


@pytest.fixture
def server():
    s = OpsServer("127.0.0.1:0", status, routes={
        ("POST", "/diverts/"): lambda path, body: (201, {"path": path, "body": body.decode()}),
    }).start()
    yield s
    s.stop()


def get(server, path, method="GET", data=None, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=data,
                                 method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_healthz_status_and_metrics(server):
    assert get(server, "/healthz") == (200, '{"healthy": true}')
    code, body = get(server, "/status")
    assert code == 200 and json.loads(body)["exchanges"][0]["name"] == "logs"
    assert "metrics" not in json.loads(body)
    code, body = get(server, "/metrics")
    assert code == 200 and 'rtroute_routed_total{exchange="lo\\"gs"} 3' in body
    assert get(server, "/nope")[0] == 404


def test_extra_routes_receive_path_and_body(server):
    code, body = get(server, "/diverts/x", method="POST", data=b"{}")
    assert code == 201 and json.loads(body) == {"path": "/diverts/x", "body": "{}"}


def test_non_loopback_requires_a_token():
    with pytest.raises(ValueError, match="token"):
        OpsServer("0.0.0.0:0", status)


def test_token_is_checked():
    s = OpsServer("127.0.0.1:0", status, token="s3cret").start()
    try:
        assert get(s, "/status")[0] == 401
        assert get(s, "/status", headers={"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        s.stop()


def test_listen_parsing():
    assert split_listen("127.0.0.1:9419") == ("127.0.0.1", 9419)
    assert split_listen("[::1]:80") == ("::1", 80)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")
    with pytest.raises(ValueError):
        split_listen("127.0.0.1")
    assert prometheus_text({}) == "\n"
