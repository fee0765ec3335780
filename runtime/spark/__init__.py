"""The Spark bridge: the ``actorbus`` data source and a handler pool on executors."""

from ._datasource import register
from ._handler_pool import SparkHandlerPool

__all__ = ["SparkHandlerPool", "register"]
