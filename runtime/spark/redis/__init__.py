"""The Spark bridge on Redis topics (``option("redis", url)``, DESIGN §3.10).

- ``_source``: the streaming reader: one read task per topic partition, the group's
  pending entries as the lease log, acks on commit.
- ``_sink``: the batch and streaming writers: rows staged per task in the partition's
  hash slot, one commit script per partition, once per (producer id, batch id).
- ``_rows``: the reads and staging in Arrow columns both sides share.
"""
