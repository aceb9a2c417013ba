"""Configuration: the files rtroute reads and every check of what they say.

- :mod:`~rtroute.config.rtroute_toml`: ``rtroute.toml`` (``[broker]``, ``[http]``,
  ``[[exchange]]``; :func:`~rtroute.config.rtroute_toml.load`), built on the section parsers
  :mod:`~rtroute.config.divert` (``[[divert]]``, and a divert given to the HTTP API) and
  :mod:`~rtroute.config.shovel` (``[[shovel]]``, with :mod:`~rtroute.config.shovel_fields`);
- :mod:`~rtroute.config.lines`: the checked reader every section uses (:class:`TableReader`),
  over :mod:`~rtroute.config.toml_lines` and :mod:`~rtroute.config.json_lines` (parsers that
  map each value to its line) and :mod:`~rtroute.config.source` (where a value came from);
- :mod:`~rtroute.config.validators`: checks of single values several sections share;
- :mod:`~rtroute.config.constants`: the defaults and choices the checks and the commands share
  (``DEFAULT_URI``, ``EXCHANGE_KINDS``, ``ROUTING_TYPES``...);
- :mod:`~rtroute.config.bindings_file`: binding files for ``rtroute route`` and the Spark job.

Nothing here imports pika, the sidecar, the shovel or the diverts' runtime: they import it.
"""
