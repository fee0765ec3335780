"""The ``actorbus`` command line.

- ``_main``: the entry point and its subcommands (``demo``, ``serve``, ``stats``, ``dlq``,
  ``bench``).
- ``_serve``, ``_remote``, ``_endpoint``: a standalone broker and the commands that inspect
  one.
- ``_topics_file``: topics files (TOML); ``_metrics``: the Prometheus endpoint.
- ``_spark_session``: the quiet local Spark session the demo and the benchmarks use.
- ``demo/``: ``actorbus demo``, the order pipeline.

Imports run one way: ``cli`` -> ``broker`` / ``spark`` -> ``publisher`` -> ``core``.
"""
