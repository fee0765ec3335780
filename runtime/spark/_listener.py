"""Acks the batch a query committed last, from the query's progress events.

The stream reader acks a batch when Spark asks for the next one, so the last batch of
a query that stops, and the only batch of ``trigger(once=True)``, would stay leased
until the lease expired and the group redelivered them. Spark reports a batch's
progress after its commit-log entry is written, so an ``endOffset`` seen in a progress
event is committed: this listener, in the user's driver process, acks it.

Acks are cumulative and idempotent, and the broker acks only what its lease log handed
out, so a late or repeated event acks nothing twice and nothing unread.

A Redis source's offset is acked the same way, on the Redis it names.

The listener sees the progress of every query of the session, once per micro-batch.
PySpark's own callback converts each event whole into Python objects, one py4j round
trip per field, on the driver; this one reads only the sources' end offsets off the Java
event (a few calls per source).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from runtime.broker._client import Channel, parse_address
from runtime.redis._connection import Connection
from runtime.spark._options import read_authkey
from runtime.spark._source import lease_of_offset
from runtime.spark.redis._source import REDIS_FIELD, ack_through, resolved_ends

__all__ = ["AckOnProgress"]

logger = logging.getLogger(__name__)


class AckOnProgress(StreamingQueryListener):
    """Acks every actorbus source's ``endOffset`` of each progress event."""

    @property
    def _jlistener(self) -> Any:
        """What `spark.streams.addListener` registers: the lean callbacks below."""
        made = self.__dict__.get("_lean")
        if made is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is added to an active session"
            made = self.__dict__["_lean"] = jvm.PythonStreamingQueryListenerWrapper(
                _EndOffsets(self))
        return made

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to do."""

    def onQueryProgress(self, event: Any) -> None:
        """Ack each actorbus source's committed end offset (a converted event)."""
        for source in event.progress.sources:
            self.ack(source.endOffset)

    def ack(self, end_offset: str | None) -> None:
        """Ack below one source's end offset if it is an actorbus offset; never raises."""
        try:
            ack_end_offset(end_offset)
        except ConnectionError as exc:
            # The broker is gone: most often closed right after a query that finished
            # (availableNow, once), before Spark handed this event over. Nothing to do:
            # the lease ends with that broker, or returns to the group after
            # lease_seconds on one that comes back (at-least-once).
            logger.info("actorbus: a committed batch was not acked, the broker is "
                        "unreachable: %s", exc)
        except Exception as exc:  # the next batch's latestOffset acks it anyway
            logger.warning("actorbus: could not ack a committed batch: %s", exc)

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to do."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do."""


class _EndOffsets:
    """The Java-side callbacks (py4j): only a progress event's source end offsets are
    read from the JVM, and handed to the listener's `AckOnProgress.ack`."""

    def __init__(self, listener: AckOnProgress) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        """Nothing to do."""

    def onQueryProgress(self, jevent: Any) -> None:
        """Ack each actorbus source's committed end offset."""
        for jsource in jevent.progress().sources():
            self._listener.ack(jsource.endOffset())

    def onQueryIdle(self, jevent: Any) -> None:
        """Nothing to do."""

    def onQueryTerminated(self, jevent: Any) -> None:
        """Nothing to do."""

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def ack_end_offset(end_offset: str | None) -> bool:
    """Ack below an actorbus offset (JSON); False for another source's offset."""
    try:
        offset = json.loads(end_offset) if end_offset else None
    except ValueError:
        return False
    if isinstance(offset, dict) and isinstance(offset.get(REDIS_FIELD), list):
        return _ack_redis(offset)
    lease = lease_of_offset(offset) if isinstance(offset, dict) else None
    if lease is None or not isinstance(offset, dict):
        return False
    address, authkey_env, topic, group, consumer, lease_seconds = lease
    with Channel(parse_address(address), read_authkey(authkey_env)) as channel:
        channel.call("lease_ack", topic, group, consumer, float(lease_seconds), int(offset["offset"]))
    return True


def _ack_redis(offset: dict[str, Any]) -> bool:
    """Ack below a Redis source's offset (nothing when its URL was left out)."""
    url, topic, group, consumer = offset[REDIS_FIELD]
    if url is None:
        return False
    connection = Connection(url)
    try:
        ack_through(connection, topic, group, consumer,
                    resolved_ends(connection, topic, group, consumer, offset), None)
    finally:
        connection.close()
    return True
