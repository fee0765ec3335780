"""The Spark bridge: the ``actorbus`` data source and a handler pool on executors."""

from runtime.spark._datasource import register
from runtime.spark._handler_pool import SparkHandlerPool

__all__ = ["SparkHandlerPool", "register"]
