"""AMQP 0-9-1 method ids, the one table: each method as the ``u32`` its frame's payload starts
with (class id << 16 | method id), so that a frame's method is one unpack and one compare.

Every module that reads or writes method frames takes its ids from here: the framing
(:mod:`rtroute.amqp.frame_codec`), the frame reader under pika (:mod:`rtroute.amqp.frames`) and
the proxy (:mod:`rtroute.proxy.wire`). The numbers are the spec's (pika's ``pika.spec`` has the
same: ``tests/packaging/test_pika_range.py`` compares them). Pure: no pika.
"""
from __future__ import annotations

__all__ = [
    "BASIC_ACK",
    "BASIC_DELIVER",
    "BASIC_GET_OK",
    "BASIC_NACK",
    "BASIC_PUBLISH",
    "BASIC_RETURN",
    "CHANNEL_CLOSE",
    "CHANNEL_CLOSE_OK",
    "CHANNEL_OPEN",
    "CHANNEL_OPEN_OK",
    "CONFIRM_SELECT",
    "CONFIRM_SELECT_OK",
    "CONNECTION_CLOSE",
    "CONNECTION_CLOSE_OK",
    "CONNECTION_OPEN",
    "CONNECTION_OPEN_OK",
    "CONNECTION_START",
    "CONNECTION_START_OK",
    "CONNECTION_TUNE",
    "CONNECTION_TUNE_OK",
    "EXCHANGE_BIND",
    "EXCHANGE_BIND_OK",
    "EXCHANGE_DECLARE",
    "EXCHANGE_DECLARE_OK",
    "EXCHANGE_DELETE",
    "EXCHANGE_DELETE_OK",
    "EXCHANGE_UNBIND",
    "EXCHANGE_UNBIND_OK",
    "QUEUE_BIND",
    "QUEUE_BIND_OK",
    "QUEUE_UNBIND",
    "QUEUE_UNBIND_OK",
    "TX_SELECT",
    "method_id",
]


def method_id(class_id: int, method: int) -> int:
    """A method's (class id, method id) as the ``u32`` they make on the wire, so that a
    frame's method is one unpack."""
    return class_id << 16 | method


CONNECTION_START = method_id(10, 10)
CONNECTION_START_OK = method_id(10, 11)
CONNECTION_TUNE = method_id(10, 30)
CONNECTION_TUNE_OK = method_id(10, 31)
CONNECTION_OPEN = method_id(10, 40)
CONNECTION_OPEN_OK = method_id(10, 41)
CONNECTION_CLOSE = method_id(10, 50)
CONNECTION_CLOSE_OK = method_id(10, 51)
CHANNEL_OPEN = method_id(20, 10)
CHANNEL_OPEN_OK = method_id(20, 11)
CHANNEL_CLOSE = method_id(20, 40)
CHANNEL_CLOSE_OK = method_id(20, 41)
EXCHANGE_DECLARE = method_id(40, 10)
EXCHANGE_DECLARE_OK = method_id(40, 11)
EXCHANGE_DELETE = method_id(40, 20)
EXCHANGE_DELETE_OK = method_id(40, 21)
EXCHANGE_BIND = method_id(40, 30)
EXCHANGE_BIND_OK = method_id(40, 31)
EXCHANGE_UNBIND = method_id(40, 40)
EXCHANGE_UNBIND_OK = method_id(40, 51)
QUEUE_BIND = method_id(50, 20)
QUEUE_BIND_OK = method_id(50, 21)
QUEUE_UNBIND = method_id(50, 50)
QUEUE_UNBIND_OK = method_id(50, 51)
BASIC_PUBLISH = method_id(60, 40)
BASIC_RETURN = method_id(60, 50)
BASIC_DELIVER = method_id(60, 60)
BASIC_GET_OK = method_id(60, 71)
BASIC_ACK = method_id(60, 80)
BASIC_NACK = method_id(60, 120)
CONFIRM_SELECT = method_id(85, 10)
CONFIRM_SELECT_OK = method_id(85, 11)
TX_SELECT = method_id(90, 10)
