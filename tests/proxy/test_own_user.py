"""What the proxy's own user needs, as docs/proxy.md gives it (its ``rabbitmqctl`` lines are read
from the page): exactly those permissions and that tag are enough for a proxy to serve.
(Before, the page left out read on ``amq.gen-.*``: a proxy with exactly its permissions never
became ready.)"""
from __future__ import annotations

import re
import shlex
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import pytest

from ..conftest import broker_uri_for
from .conftest import assert_round_trip

pytestmark = pytest.mark.broker
PAGE = Path(__file__).resolve().parents[2] / "docs" / "proxy.md"


def _documented() -> tuple[list[str], tuple[str, str, str]]:
    """The tags and the (configure, write, read) patterns of docs/proxy.md's commands."""
    text = PAGE.read_text()
    start = text.index("**What the proxy's own user needs**")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.DOTALL).group(1)
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line]
    (tags,) = [c[3:] for c in commands if c[1] == "set_user_tags"]
    (permissions,) = [c for c in commands if c[1] == "set_permissions"]
    configure, write, read = permissions[-3:]
    return tags, (configure, write, read)


def test_the_documented_permissions_of_the_proxys_user_are_enough(proxies, mgmt, exchange_name):
    tags, (configure, write, read) = _documented()
    user, secret = f"rtroute-test-proxy-user-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    vhost = "/"  # as on the page (-p /)
    mgmt.request("PUT", f"users/{user}", {"password": secret, "tags": ",".join(tags)})
    try:
        mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/{user}",
                     {"configure": configure, "write": write, "read": read})
        proxy = proxies(broker=broker_uri_for(vhost, credentials=f"{user}:{secret}"))
        conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))  # a client: guest
        try:
            assert_round_trip(conn.channel(), exchange_name, b"served")
        finally:
            conn.close()
        assert "ACCESS_REFUSED" not in proxy.log_path.read_text()
    finally:
        mgmt.request("DELETE", f"users/{user}")
