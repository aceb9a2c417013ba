"""Control, the client side of the ops endpoint (:mod:`rtroute.ops.http`): what ``rtroute
status``, ``rtroute divert add|remove`` and ``rtroute shovel restart`` call.

- :mod:`~rtroute.control.client`: the calls (endpoint, token, errors);
- :mod:`~rtroute.control.status_tables`: ``/status`` as aligned tables.
"""
