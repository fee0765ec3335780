"""A Spark Structured Streaming stage between two topics (needs pyspark and Java 17).

Spark reads group "spark" of topic "words" through the broker endpoint
(`format("actorbus")`), counts words, and writes the counts to topic "counts", exactly
once per micro-batch. Swap `local[*]` for your cluster's master URL to scale out.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile

from runtime import Bus, Message

if __name__ == "__main__":
    os.environ["ACTORBUS_KEY"] = secrets.token_hex(16)  # Spark's workers read the key from here
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from runtime.spark import register

    spark = (SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    with Bus() as bus, tempfile.TemporaryDirectory() as checkpoint:
        words = bus.create_topic("words", ack_timeout=None)
        words.create_group("spark")
        counts = bus.create_topic("counts")
        counts.subscribe(lambda d: print("count:", d.message.data.decode()), auto_ack=True)
        for line in ["to be or not to be", "that is the question", "to see or not to see"]:
            words.publish(Message(data=line.encode()))
        server = bus.serve(("127.0.0.1", 0), authkey=os.environ["ACTORBUS_KEY"].encode())
        endpoint = {"address": f"{server.address[0]}:{server.address[1]}", "authkey_env": "ACTORBUS_KEY"}
        lines = spark.readStream.format("actorbus").options(**endpoint, topic="words", group="spark").load()
        totals = (lines.select(F.explode(F.split(F.col("payload").cast("string"), " ")).alias("word"))
                  .groupBy("word").count())
        query = (totals.select(F.concat_ws("=", "word", "count").alias("payload"))
                 .writeStream.format("actorbus").options(**endpoint, topic="counts")
                 .outputMode("complete").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        query.stop()
        counts.join(timeout=30)
        print("words acked:", words.stats().delivered, "| counts published:", counts.stats().published)
        assert words.join(timeout=30)
        assert counts.stats().published > 0
    spark.stop()
