"""The ``actorbus`` Python data source: a streaming source and two sinks."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from runtime.core._settings import TopicSettings
from runtime.errors import InvalidSettingsError
from runtime.spark._arrow import SOURCE_SCHEMA, check_sink_schema
from runtime.spark._batch_source import ActorbusBatchReader, batch_options
from runtime.spark._listener import AckOnProgress
from runtime.spark._options import (
    RedisSinkOptions,
    RedisSourceOptions,
    SinkOptions,
    SourceOptions,
    uses_redis,
)
from runtime.spark._sink import ActorbusBatchWriter, ActorbusStreamWriter
from runtime.spark._source import ActorbusStreamReader
from runtime.spark.redis._sink import RedisBatchWriter, RedisStreamWriter
from runtime.spark.redis._source import RedisStreamReader

__all__ = ["ActorbusDataSource", "register"]


class ActorbusDataSource(DataSource):
    """``format("actorbus")``: read a group as a stream, write rows to a topic.

    Every option is checked on the driver by the first call Spark makes, before
    anything connects (`check_options`): ``schema()`` at a read's ``load()``,
    ``writer()`` at ``save()``, ``streamWriter()`` in a streaming query's first step
    (PySpark calls nothing of a sink at ``start()``). A bad option is an
    `InvalidSettingsError` naming the option and its value; an unknown one lists the
    known ones of that side.

    With option ``redis`` the same calls also check that the Redis answers and holds
    the topic (and the source's group), and read its recorded settings.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "actorbus"

    def schema(self) -> str:
        """The source's columns; refuses the sink's options (at ``load()``)."""
        if uses_redis(self.options):
            _checked_source(self.options)
        else:
            SourceOptions.parse(self.options)
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> ActorbusBatchReader:
        """The batch source (see `ActorbusBatchReader`).

        Raises:
            InvalidSettingsError: naming ``redis``: a batch read of a Redis topic is
                not offered (a streaming query with ``trigger(availableNow=True)`` reads
                what waits, and acks it on commit).
        """
        if uses_redis(self.options):
            raise InvalidSettingsError("redis", (
                "spark.read of a Redis topic is not offered; read it with spark.readStream "
                "and trigger(availableNow=True), which acks what it read on commit"))
        return ActorbusBatchReader(batch_options(self.options), schema)

    def streamReader(self, schema: StructType) -> ActorbusStreamReader | RedisStreamReader:
        """The streaming source (see `ActorbusStreamReader`, `RedisStreamReader`)."""
        if uses_redis(self.options):
            options, settings = _checked_source(self.options)
            return RedisStreamReader(options, schema, settings)
        return ActorbusStreamReader(SourceOptions.parse(self.options), schema)

    def streamWriter(
        self, schema: StructType, overwrite: bool,
    ) -> ActorbusStreamWriter | RedisStreamWriter:
        """The streaming sink (see `ActorbusStreamWriter`, `RedisStreamWriter`)."""
        if uses_redis(self.options):
            return RedisStreamWriter(*_checked_sink(self.options, schema))
        options = SinkOptions.parse(self.options)
        check_sink_schema(schema, options.error_column)
        return ActorbusStreamWriter(options)

    def writer(self, schema: StructType, overwrite: bool) -> ActorbusBatchWriter | RedisBatchWriter:
        """The batch sink (see `ActorbusBatchWriter`, `RedisBatchWriter`)."""
        if uses_redis(self.options):
            return RedisBatchWriter(*_checked_sink(self.options, schema))
        options = SinkOptions.parse(self.options)
        check_sink_schema(schema, options.error_column)
        return ActorbusBatchWriter(options)


def _checked_source(options: Any) -> tuple[RedisSourceOptions, TopicSettings]:
    """The Redis source's options, checked against the Redis (see `_RedisTopic.check`)."""
    parsed = RedisSourceOptions.parse(options)
    connection = parsed.connect()
    try:
        return parsed, parsed.check(connection, parsed.group)
    finally:
        connection.close()


def _checked_sink(options: Any, schema: StructType) -> tuple[RedisSinkOptions, TopicSettings]:
    """The Redis sink's options and the frame's columns, checked."""
    parsed = RedisSinkOptions.parse(options)
    check_sink_schema(schema, parsed.error_column)
    if "topic" in schema.fieldNames():
        raise InvalidSettingsError("redis", (
            "a Redis sink writes to its topic option alone; drop the frame's 'topic' column "
            "(or write each topic with a query of its own)"))
    connection = parsed.connect()
    try:
        return parsed, parsed.check(connection)
    finally:
        connection.close()


_LISTENER = "_actorbus_ack_listener"


def register(spark: Any) -> None:
    """Register the ``actorbus`` format with ``spark`` (a `SparkSession`); idempotent.

    Also adds the listener that acks each query's last committed batch (see
    `runtime.spark._listener`).
    """
    spark.dataSource.register(ActorbusDataSource)
    if getattr(spark, _LISTENER, None) is None:
        listener = AckOnProgress()
        spark.streams.addListener(listener)
        setattr(spark, _LISTENER, listener)
