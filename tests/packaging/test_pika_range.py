"""The pika range: pinned in pyproject.toml, warned about outside it, and the internals rtroute
patches are there in the pika installed (no broker needed: scripts/check-sdist.sh runs this
with the oldest pika allowed on the oldest Python, the newest on the newest)."""
from __future__ import annotations

import re
import socket
import warnings
from unittest import mock

import pika
import pytest
from pika.adapters.select_connection import IOLoop
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport

from rtroute.amqp import frames, pika_internals, socket_io
from rtroute.amqp.pika_version import (
    TESTED,
    UntestedPikaWarning,
    untested_reason,
    warn_if_untested,
)


def test_pyproject_pins_pika_to_the_tested_range(project):
    (pika_requirement,) = [d for d in project["project"]["dependencies"]
                           if re.match(r"pika\b", d)]
    (low_major, low_minor), (high_major, high_minor) = TESTED
    assert pika_requirement.replace(" ", "") == (
        f"pika>={low_major}.{low_minor},<{high_major}.{high_minor}")


def test_the_installed_pika_is_in_the_tested_range():
    assert untested_reason() is None, untested_reason()


@pytest.mark.parametrize("version", ["1.2.1", "1.5.0", "2.0.0b1", "1.10.0", "unknown"])
def test_a_pika_outside_the_range_warns_with_the_remedy(version):
    with pytest.warns(UntestedPikaWarning, match=re.escape(f"pika {version} is outside")) as seen:
        assert warn_if_untested(version) is True
    assert "pip install 'pika>=1.3,<1.5'" in str(seen[0].message)


@pytest.mark.parametrize("version", ["1.3.0", "1.3.2", "1.4.0b1", "1.4.4"])
def test_a_pika_inside_the_range_is_silent(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_untested(version) is False


def test_the_fast_path_installs_on_this_pika_without_a_broker():
    """frames.install and socket_io.coalesce_io find pika's internals on a real, unconnected
    SelectConnection and transport (the broker tests exercise them on the wire)."""
    loop = IOLoop()
    left, right = socket.socketpair()
    try:
        connection = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", 1),
                                           custom_ioloop=loop)
        connection._transport = _AsyncPlaintextTransport(left, mock.Mock(), mock.Mock())
        reader = frames.install(connection)
        assert connection._on_data_available is reader
        assert connection._transport._MAX_RECV_BYTES == socket_io.RECV_BYTES
        assert connection._frame_buffer == b""
    finally:
        left.close()
        right.close()
        loop.close()


def test_the_method_id_table_is_pika_specs():
    """Every id of rtroute.amqp.methods (the one table the frame reader, the framing and the
    proxy use) is the spec's, as pika.spec has it; and the reader's bytes are those ids."""
    import pika.spec

    from rtroute.amqp import frames, methods

    classes = {"CONNECTION": pika.spec.Connection, "CHANNEL": pika.spec.Channel,
               "EXCHANGE": pika.spec.Exchange, "QUEUE": pika.spec.Queue,
               "BASIC": pika.spec.Basic, "CONFIRM": pika.spec.Confirm, "TX": pika.spec.Tx}
    names = [n for n in methods.__all__ if n != "method_id"]
    assert len(names) == 33
    for name in names:
        prefix, _, method = name.partition("_")
        spec = getattr(classes[prefix], method.title().replace("_", ""))
        assert getattr(methods, name) == spec.INDEX, name
    assert frames._DELIVER == b"\x00\x3c\x00\x3c"
    assert frames._ACK == b"\x00\x3c\x00\x50"
    assert frames._NACK == b"\x00\x3c\x00\x78"


def test_reading_cannot_be_paused_on_a_transport_other_than_plain_tcp():
    """The shovel's read pause says it could not (TLS) instead of doing nothing silently."""
    tls_like = mock.Mock(_transport=object())
    assert pika_internals.set_reading(tls_like, False) is False
    assert pika_internals.set_reading(None, False) is False
