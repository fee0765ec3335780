"""Closing a topic's Publishers at shutdown: one budget, never waiting on a held topic."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.publisher._publisher import Publisher

__all__ = ["close_publishers"]

# How often a flush in progress re-checks whether the topic holds it.
_SLICE = 0.05


def close_publishers(
    publishers: list[Publisher], *, held: Callable[[], bool], release: Callable[[], None],
    deadline: float,
) -> None:
    """Flush and close ``publishers`` by ``deadline`` (`time.monotonic`) in total.

    Every Publisher refuses new publishes first (blocked ones raise code 9). Each flush
    then gets what is left of the budget, as long as it makes progress. When the topic
    holds a flush (``held()``: a publish would wait for ``max_pending``, a full group or
    an unread ring) and nothing settled for a slice, ``release()`` closes the topic, as
    it releases a blocked `Topic.publish`: what the topic accepted resolves with its id,
    the rest fails with `TopicClosedError` (it was never published), and the remaining
    flushes return at once. Never raises.
    """
    for publisher in publishers:
        publisher._refuse()  # first, so a released flush lets no blocked publish in
    for publisher in publishers:
        before = publisher.outstanding[0]
        while before and time.monotonic() < deadline:
            try:
                publisher.flush(timeout=min(_SLICE, max(0.0, deadline - time.monotonic())))
                break
            except TimeoutError:
                now = publisher.outstanding[0]
                if now >= before and held():
                    release()
                before = now
            except Exception:
                break
    for publisher in publishers:
        try:
            publisher.close(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:
            continue
