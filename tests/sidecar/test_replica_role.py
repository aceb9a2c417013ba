"""ReplicaRoles (no broker: the management API's answer is given): a replica's consumer tag
against the queue's single active consumer, never waiting for the API in ``/status``."""
from __future__ import annotations

import threading

from rtroute.amqp.management import ManagementError
from rtroute.sidecar import replica_role
from rtroute.sidecar.replica_role import ReplicaRoles

from ..conftest import wait_for


class Answers:
    """What the management API says of each queue (a tag, or an error to raise)."""

    def __init__(self, **tags):
        self.tags = tags
        self.asked: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def queue(self, name, vhost):
        self.gate.wait(5)
        self.asked.append(name)
        tag = self.tags[name]
        if isinstance(tag, Exception):
            raise tag
        return {"name": name, "single_active_consumer_tag": tag}


def settled(roles, queue, tag):
    wait_for(lambda: roles.role(queue, tag)[1] != "asking the management API", 5)
    return roles.role(queue, tag)


def test_the_active_consumer_is_active_and_another_is_standby():
    roles = ReplicaRoles(Answers(q="ctag-a"), "/")
    assert settled(roles, "q", "ctag-a") == ("active", None)
    assert roles.role("q", "ctag-b") == ("standby", None)
    assert roles.role("q", None) == ("not_consuming", None)


def test_status_never_waits_for_the_api_and_a_change_shows_after_the_ttl(monkeypatch):
    answers = Answers(q="ctag-a")
    answers.gate.clear()  # the API does not answer yet
    roles = ReplicaRoles(answers, "/")
    assert roles.role("q", "ctag-a") == ("unknown", "asking the management API")
    answers.gate.set()
    assert settled(roles, "q", "ctag-a") == ("active", None)
    answers.tags["q"] = "ctag-b"  # the other replica took over
    monkeypatch.setattr(replica_role, "ROLE_TTL", 0.0)
    wait_for(lambda: roles.role("q", "ctag-a") == ("standby", None), 5)


def test_an_unreachable_api_or_no_active_consumer_yet_is_unknown_with_the_reason():
    roles = ReplicaRoles(Answers(q=ManagementError("unreachable", None, "GET", "q"), r=None),
                         "/")
    assert settled(roles, "q", "ctag-a") == ("unknown", "unreachable")
    assert settled(roles, "r", "ctag-a") == (
        "unknown", "the broker has not named the queue's active consumer yet")
    assert ReplicaRoles(None, "/").role("q", "ctag-a") == ("unknown", "no management API")
