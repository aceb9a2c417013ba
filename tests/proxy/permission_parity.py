"""The permission scenario for the x-rtopic plugin and for `rtroute proxy`: what a user with
given permissions may do with an x-rtopic exchange ``NAME``, as a client sees it.

An administrator (the broker's guest) declares ``NAME`` (x-rtopic) and a queue ``NAME-q`` (not
``NAME.q``: a pattern on ``NAME\\.`` must not cover it); then, for each permission set of
:data:`PERMISSION_SETS` (configure, write, read on the vhost), a user with exactly those
permissions, through a client library (pika here, amqplib in node/permissions.js):

- ``bind``: binds ``NAME-q`` to ``NAME`` with ``a.b`` (the plugin: write on the queue, read on
  ``NAME``);
- ``publish``: publishes to ``NAME`` with ``a.b``, with confirms (the plugin: write on ``NAME``);
- ``received``: what ``NAME-q`` holds afterwards of a message the administrator published to
  ``NAME`` with ``a.b`` (the user's binding routes it only if the bind was allowed), and of the
  user's own publish.

Each outcome is ``"ok"`` or ``[code, text]`` with the names replaced by ``NAME``, ``QUEUE`` and
``USER``. Record the plugin's (tests/proxy/test_permission_parity.py compares the proxy's)::

    ../shared/rtopic-plugin/node.sh start
    python -m tests.proxy.permission_parity record amqp://guest:guest@127.0.0.1:5702/%2F \\
        http://guest:guest@127.0.0.1:15702/ tests/proxy/parity/permissions-plugin-3.10.json
"""
from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit, urlunsplit

import pika
import pika.exceptions

from rtroute.amqp.management import ManagementClient

HERE = Path(__file__).parent

# name -> (configure, write, read), each a RabbitMQ permission pattern ({NAME}: the exchange)
PERMISSION_SETS: dict[str, tuple[str, str, str]] = {
    "none": ("", "", ""),
    "read_only": ("", "", ".*"),
    "write_only": ("", ".*", ""),
    # covers NAME.bindings (and the queue) but not NAME: as ^orders\..* for an exchange orders
    "bindings_not_name": ("", "^{NAME}[.-].*", "^{NAME}[.-].*"),
    # exactly NAME and the queue: the plugin allows both; the broker's own check on
    # NAME.bindings refuses them through the proxy (docs/proxy.md: permissions)
    "exactly_name": ("", "^{NAME}(-q)?$", "^{NAME}$"),
    "all": (".*", ".*", ".*"),
}
STEPS = ("bind", "publish", "received")


def _refusal(exc: BaseException) -> list[Any]:
    return [getattr(exc, "reply_code", None), getattr(exc, "reply_text", str(exc))]


def pika_client(user_uri: str, name: str, queue: str) -> dict[str, Any]:
    """The user's steps with pika: {"bind": ..., "publish": ...}."""
    out: dict[str, Any] = {}
    conn = pika.BlockingConnection(pika.URLParameters(user_uri))
    try:
        ch = conn.channel()
        try:
            ch.queue_bind(queue, name, "a.b")
            out["bind"] = "ok"
        except pika.exceptions.ChannelClosedByBroker as exc:
            out["bind"] = _refusal(exc)
        ch = conn.channel()
        ch.confirm_delivery()
        try:
            ch.basic_publish(name, "a.b", b"from the user")
            out["publish"] = "ok"
        except pika.exceptions.ChannelClosedByBroker as exc:
            out["publish"] = _refusal(exc)
        except pika.exceptions.NackError:
            out["publish"] = "nack"
    finally:
        if conn.is_open:
            conn.close()
    return out


def node_client(user_uri: str, name: str, queue: str) -> dict[str, Any]:
    """The user's steps with Node's amqplib (node/permissions.js, installed by the caller)."""
    done = subprocess.run(["node", str(HERE / "node" / "permissions.js"), user_uri, name, queue],
                          capture_output=True, check=True, text=True, timeout=60)
    return json.loads(done.stdout)


def _with_credentials(uri: str, user: str, password: str) -> str:
    parts = urlsplit(uri)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _normalised(value: Any, names: dict[str, str]) -> Any:
    text = json.dumps(value)
    for real, shown in names.items():
        text = text.replace(real, shown)
    return json.loads(text)


def observe(admin_uri: str, management_uri: str,
            client: Callable[[str, str, str], dict[str, Any]] = pika_client,
            user_uri: str | None = None) -> dict[str, Any]:
    """{permission set: {step: outcome}} for ``client``. ``admin_uri``: where the administrator
    declares and publishes (the plugin's broker, or the proxy); ``user_uri``: where the user
    connects (default: ``admin_uri``), its credentials replaced by the user's."""
    api = ManagementClient(management_uri)
    vhost = urlsplit(admin_uri).path[1:] or "/"
    vhost = vhost.replace("%2F", "/").replace("%2f", "/")
    run = uuid.uuid4().hex[:8]
    name, queue = f"perm{run}", f"perm{run}-q"
    conn = pika.BlockingConnection(pika.URLParameters(admin_uri))
    results: dict[str, Any] = {}
    try:
        admin = conn.channel()
        admin.exchange_declare(name, "x-rtopic", auto_delete=False)
        for set_name, patterns in PERMISSION_SETS.items():
            user, password = f"rtroute-perm-{run}-{set_name}", "secret"
            api.request("PUT", f"users/{quote(user, safe='')}",
                        {"password": password, "tags": ""})
            configure, write, read = (p.replace("{NAME}", name) for p in patterns)
            api.request("PUT", f"permissions/{quote(vhost, safe='')}/{quote(user, safe='')}",
                        {"configure": configure, "write": write, "read": read})
            admin.queue_declare(queue)
            try:
                seen = client(_with_credentials(user_uri or admin_uri, user, password),
                              name, queue)
                admin.basic_publish(name, "a.b", b"from the administrator")
                got = []
                while True:
                    method, _props, body = admin.basic_get(queue, auto_ack=True)
                    if method is None:
                        break
                    got.append(body.decode())
                seen["received"] = sorted(got)
            finally:
                admin.queue_delete(queue)
                api.request("DELETE", f"users/{quote(user, safe='')}")
            results[set_name] = _normalised(seen, {queue: "QUEUE", user: "USER", name: "NAME"})
        admin.exchange_delete(name)
    finally:
        if conn.is_open:
            conn.close()
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] != "record":
        print(__doc__, file=sys.stderr)
        return 2
    _, uri, management_uri, out = argv
    observed = {"pika": observe(uri, management_uri, pika_client),
                "node": observe(uri, management_uri, node_client)}
    Path(out).write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
