"""rtroute.proxy.sync without a broker: a change waits for every other member's reply, a
member that goes away is not waited for, a silent one only until the timeout, and replies and
announcements are believed only from the proxies' own user."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from rtroute.proxy.sync import ProxySync


def _sync(loop, applied=None, sent=None) -> ProxySync:
    sync = ProxySync(None, "/", loop, "rtroute-proxy",  # type: ignore[arg-type]
                     apply=(applied if applied is not None else []).append,
                     to_pika=lambda fn: (sent if sent is not None else []).append(fn))
    sync._own("amq.gen-self")
    return sync


def test_a_change_waits_for_every_other_proxy_and_not_for_one_that_went_away():
    async def scenario() -> list[str]:
        sync = _sync(asyncio.get_running_loop())
        for member in ("amq.gen-self", "amq.gen-b", "amq.gen-c"):
            sync._membership(member, True)
        seen = []
        task = asyncio.ensure_future(sync.announce({"learn": "orders"}))
        await asyncio.sleep(0.01)
        (ident,) = sync._pending
        sync._replied(ident, "amq.gen-b")
        await asyncio.sleep(0.01)
        seen.append("done" if task.done() else "waiting")
        sync._membership("amq.gen-c", False)  # its proxy died with its queue
        await asyncio.wait_for(task, 1)
        seen.append("done")
        return seen

    assert asyncio.run(scenario()) == ["waiting", "done"]


def test_a_silent_proxy_is_waited_for_only_until_the_timeout():
    async def scenario() -> int:
        sync = _sync(asyncio.get_running_loop())
        sync._membership("amq.gen-b", True)
        await sync.announce({"learn": "orders"}, timeout=0.05)
        return sync.timeouts

    assert asyncio.run(scenario()) == 1


def test_alone_a_change_waits_for_nobody():
    async def scenario() -> list:
        sent: list = []
        sync = _sync(asyncio.get_running_loop(), sent=sent)
        sync._membership("amq.gen-self", True)
        await asyncio.wait_for(sync.announce({"learn": "orders"}), 1)
        return sent

    assert asyncio.run(scenario()) == []  # nothing published


def test_only_the_proxies_own_user_is_believed():
    async def scenario() -> list:
        applied: list = []
        loop = asyncio.get_running_loop()
        sync = _sync(loop, applied=applied)
        sync._own_queue = "amq.gen-self"
        body = json.dumps({"bind": "orders", "destination": ["queue", "q"], "key": "a.b"})
        for user in ("mallory", None, "rtroute-proxy"):
            props = SimpleNamespace(user_id=user, reply_to="amq.gen-other", correlation_id="1",
                                    type="change")
            sync._on_message(None, None, props, body.encode())
        await asyncio.sleep(0.01)
        return applied

    assert asyncio.run(scenario()) == [{"bind": "orders", "destination": ["queue", "q"],
                                        "key": "a.b"}]
