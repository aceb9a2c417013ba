"""Operations, the server side: what a running rtroute process shows and how it behaves as a
service.

- :mod:`~rtroute.ops.http`: the ops endpoint (``/livez``, ``/readyz``, ``/status``,
  ``/metrics``);
- :mod:`~rtroute.ops.metrics`: ``/metrics`` in Prometheus' format;
- :mod:`~rtroute.ops.logsetup`: process logging of the long-running commands;
- :mod:`~rtroute.ops.sd_notify`: systemd's readiness protocol;
- :mod:`~rtroute.ops.netaddr`: listen addresses (``host:port``) and free ports.

The client side (``rtroute status`` and the admin commands) is :mod:`rtroute.control`.
"""
