"""The shovel: moves messages between brokers as RabbitMQ's shovel plugin does, from outside.

One module per concern, as in the plugin:

- :mod:`~rtroute.config.shovel`: :class:`ShovelConfig` and its field-by-field checks (the
  parsers of a table's parts in :mod:`~rtroute.config.shovel_fields`);
  :mod:`~rtroute.shovel.importers` (with :mod:`~rtroute.shovel.erlang_terms`) and
  :mod:`~rtroute.shovel.definitions` read the plugin's own configurations
  (``rabbitmq.config`` terms, definitions exports);
- :mod:`~rtroute.shovel.worker`: one shovel as a state machine (``ShovelWorker``), which knows
  no protocol; each connect attempt is a :mod:`~rtroute.shovel.session` that wires a
  :mod:`~rtroute.shovel.source` side (consume, filter with
  :mod:`~rtroute.shovel.message_filter`, settle) to a :mod:`~rtroute.shovel.destination` side
  (publish with confirms, flow control); both connect and declare through
  :mod:`~rtroute.shovel.side`. The pass-through fast path works at the AMQP frame level
  (:mod:`rtroute.amqp.frames`);
- :mod:`~rtroute.shovel.status`: states, counters and the registry that ``/status`` and
  ``/metrics`` serve;
- :mod:`~rtroute.shovel.runner`: several shovels in one process (``ShovelRunner``, ``serve``);
- :mod:`~rtroute.shovel.commands`: ``rtroute shovel run`` and ``rtroute shovel status``.
"""
