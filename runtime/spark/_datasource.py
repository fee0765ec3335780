"""The ``actorbus`` Python data source: a streaming source and two sinks."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from runtime.spark._arrow import SOURCE_SCHEMA, check_sink_schema
from runtime.spark._batch_source import ActorbusBatchReader, batch_options
from runtime.spark._listener import AckOnProgress
from runtime.spark._options import SinkOptions, SourceOptions
from runtime.spark._sink import ActorbusBatchWriter, ActorbusStreamWriter
from runtime.spark._source import ActorbusStreamReader

__all__ = ["ActorbusDataSource", "register"]


class ActorbusDataSource(DataSource):
    """``format("actorbus")``: read a group as a stream, write rows to a topic.

    Every option is checked on the driver by the first call Spark makes, before
    anything connects (`check_options`): ``schema()`` at a read's ``load()``,
    ``writer()`` at ``save()``, ``streamWriter()`` in a streaming query's first step
    (PySpark calls nothing of a sink at ``start()``). A bad option is an
    `InvalidSettingsError` naming the option and its value; an unknown one lists the
    known ones of that side.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "actorbus"

    def schema(self) -> str:
        """The source's columns; refuses the sink's options (at ``load()``)."""
        SourceOptions.parse(self.options)
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> ActorbusBatchReader:
        """The batch source (see `ActorbusBatchReader`)."""
        return ActorbusBatchReader(batch_options(self.options), schema)

    def streamReader(self, schema: StructType) -> ActorbusStreamReader:
        """The streaming source (see `ActorbusStreamReader`)."""
        return ActorbusStreamReader(SourceOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ActorbusStreamWriter:
        """The streaming sink (see `ActorbusStreamWriter`)."""
        options = SinkOptions.parse(self.options)
        check_sink_schema(schema, options.error_column)
        return ActorbusStreamWriter(options)

    def writer(self, schema: StructType, overwrite: bool) -> ActorbusBatchWriter:
        """The batch sink (see `ActorbusBatchWriter`)."""
        options = SinkOptions.parse(self.options)
        check_sink_schema(schema, options.error_column)
        return ActorbusBatchWriter(options)


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
