"""The broker endpoint: a bus served to other processes and to Spark.

- ``_server`` (``Bus.serve``) and ``_remote`` (``connect`` and `RemoteBus`), with
  ``_remote_subscription`` for remote pull subscriptions.
- ``_wire``, ``_pickle_audit``, ``_auth``, ``_protocol``, ``_client``, ``_session``: frames
  and the restricted unpickler, the opcode audit that bounds what decoding a frame costs,
  the HMAC handshake, the request catalogue, the client channel and a server session.
- ``_service``, ``_publish_wait``, ``_settle``: the calls a session serves, how its publishes
  wait on backpressure, and how remote acks settle.
- ``lease``: Spark's replayable lease log per consumer, how it holds and settles
  hand-overs, and its rows.
- ``_staging``, ``_staged_rows``: staged, exactly-once publishing for the Spark sink.

Imports run one way: ``broker`` -> ``publisher`` -> ``core``.
"""
