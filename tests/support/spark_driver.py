"""A Spark driver to SIGKILL: source -> transform -> sink until killed.

Run as a script by the Spark lifecycle tests (never imported). Arguments: broker
address (or a ``redis://`` URL: both topics on that Redis), source topic, sink topic,
checkpoint directory, stall marker, lease seconds (unused with a Redis).
Its transform uppercases payloads; on the payload ``b"stall"`` it creates the stall
marker and blocks, so the test kills it inside a planned, uncommitted batch.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path


def main(address: str, source: str, sink: str, checkpoint: str, marker: str, lease: str) -> None:
    from pyspark.sql import functions as F

    from runtime.cli._spark_session import local_session
    from runtime.spark import register

    spark = local_session("local[2]", "actorbus-killed-driver", Path(tempfile.mkdtemp()),
                          **{"spark.default.parallelism": "2"})
    register(spark)

    def upper(payload: bytes) -> bytes:
        if payload == b"stall":
            Path(marker).touch()
            threading.Event().wait()  # until SIGKILL
        return payload.upper()

    on_redis = address.startswith("redis://")
    common = ({"redis": address} if on_redis
              else {"address": address, "authkey_env": "ACTORBUS_TEST_AUTHKEY"})
    leases = {} if on_redis else {"lease_seconds": lease}
    frame = spark.readStream.format("actorbus").options(
        **common, topic=source, group="spark", max_messages_per_batch="20", **leases).load()
    out = frame.select(F.udf(upper, "binary", useArrow=False)("payload").alias("payload"))
    query = (out.writeStream.format("actorbus").options(**common, topic=sink)
             .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds")
             .start())
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
