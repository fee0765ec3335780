"""Pickling a hand-over's columns without pickle's memo, where that changes nothing.

pickle remembers every object it writes but small atoms (ints, floats, None, booleans):
a memo entry, and a ``MEMOIZE`` opcode the loading side stores again, so that a second
reference to the same object is written as a reference. The columns of a hand-over of
Publisher messages hold no object twice that matters: each message is its own data, so
the pickler's fast mode (no memo) writes the same stream less the memo's work, on both
sides (compare with ``python -m benchmarks --only pipeline_pool``).

`dumps_plain` takes fast mode only for plain data: anything but builtin values,
``range`` and `Runs` (a user's object, a bytes subclass) makes it give up, and so does
a cycle (fast mode cannot write one); the caller then pickles as usual.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from runtime.core._block import Runs

__all__ = ["dumps_plain"]

# Objects the pickler asks about that are plain: ranges, runs, and classes (pickled by
# name: `Runs`' own class, a metaclass instance). Builtin values it writes without asking.
_PLAIN = (range, Runs, type)


class _NotPlain(Exception):
    """An object fast mode may not write as it is (it might be shared or large)."""


class _PlainPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _PLAIN):
            return NotImplemented  # pickled the usual way
        raise _NotPlain


def dumps_plain(obj: Any, protocol: int) -> bytes | None:
    """``obj`` pickled without the memo, or None when it is not plain data (see above)."""
    out = io.BytesIO()
    try:
        pickler = _PlainPickler(out, protocol=protocol)
        pickler.fast = True  # the C pickler's no-memo mode (an instance setting)
        pickler.dump(obj)
    except (_NotPlain, ValueError, RecursionError):  # ValueError: fast mode met a cycle
        return None
    return out.getvalue()
