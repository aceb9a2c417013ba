"""pika plumbing: URIs, (re)connection, declarations, publisher confirms, management API, bindings.

Public API:

- :func:`parse_uri`, :func:`mask_uri`, :class:`AmqpUri` -- RabbitMQ URIs to pika parameters.
- :class:`ConfirmWindow`, :class:`PublishFuture`, :class:`Outcome` -- windowed publisher confirms
  with futures or callbacks (ACKED, NACKED, RETURNED, FAILED).
- :class:`Settler`, :class:`Delivery` -- a consumer's acks in delivery-tag order, one
  ``multiple`` ack per ioloop turn, each delivery held until its publishes are confirmed.
- :class:`ReconnectingConnection`, :func:`connect_blocking`, :class:`Backoff` -- connections.
- :func:`declare`, :func:`declare_async`, :func:`parse_declarations` -- declarations as data.
- :class:`ManagementClient` -- the management HTTP API.
- :class:`BindingWatcher`, :class:`Binding` -- the live bindings of an exchange.
- :func:`publish` -- the body of ``rtroute publish``.
"""
from rtroute.amqp.binding_watcher import Binding, BindingWatcher, WatcherState
from rtroute.amqp.confirm_window import (
    ConfirmWindow,
    Outcome,
    PublishFuture,
    WindowClosed,
    WindowFull,
)
from rtroute.amqp.connection import Backoff, ReconnectingConnection, connect_blocking
from rtroute.amqp.declarations import Declaration, declare, declare_async, parse_declarations
from rtroute.amqp.management import BindingInfo, ManagementClient, ManagementError, NotFound
from rtroute.amqp.publish_tool import publish
from rtroute.amqp.settle import Delivery, Settler
from rtroute.amqp.uri import (
    AmqpUri,
    TlsOptions,
    connection_parameters,
    management_url,
    mask_uri,
    parse_uri,
)

__all__ = [
    "AmqpUri",
    "Backoff",
    "Binding",
    "BindingInfo",
    "BindingWatcher",
    "ConfirmWindow",
    "Declaration",
    "Delivery",
    "ManagementClient",
    "ManagementError",
    "NotFound",
    "Outcome",
    "PublishFuture",
    "ReconnectingConnection",
    "Settler",
    "TlsOptions",
    "WatcherState",
    "WindowClosed",
    "WindowFull",
    "connect_blocking",
    "connection_parameters",
    "declare",
    "declare_async",
    "management_url",
    "mask_uri",
    "parse_declarations",
    "parse_uri",
    "publish",
]
