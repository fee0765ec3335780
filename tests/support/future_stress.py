"""Run as a script by test_publisher_future: a reader touches the very future that
`resolve_all` is resolving, in the middle of the resolver's allocation.

On CPython a thread switch can happen inside an allocation: the allocation may run the
garbage collector, whose finalizers may release the GIL. Here every collection gets a
garbage cycle (a ``gc.callbacks`` hook makes one) whose finalizer does what another
thread could do at that moment: it reads the first future of the batch that is not
resolved yet, the one being resolved. Deterministic, so it needs no second thread.
Prints how many reads it made and exits 0 after ``batches`` batches. A future whose
attributes are not all set when it is created dies here by SIGSEGV on CPython 3.11
(see `runtime.core._future`): the two versions before the fix, one building the
instance dict on first use and one adding attributes on first use, both crashed in
the first 20 batches (under 0.2 s) in every run.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

from runtime.core._future import MessageFuture, resolve_all

BATCH = 400  # more than the interpreter keeps of freed dicts (80): building one collects


class _Reader:
    """Cyclic garbage whose finalizer reads the future being resolved."""

    batch: list[MessageFuture[int]] = []
    reads = 0

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        for future in _Reader.batch:
            if future._state == "PENDING":  # a plain attribute read touches nothing
                future.done()
                _Reader.reads += 1
                return


def _on_gc(phase: str, _info: dict[str, Any]) -> None:
    if phase == "start" and _Reader.batch:
        _Reader()  # garbage for the collection starting now


def main(batches: int) -> int:
    gc.callbacks.append(_on_gc)
    gc.set_threshold(1, 1000, 1000)  # every allocation of a tracked object collects
    try:
        for _ in range(batches):
            batch: list[MessageFuture[int]] = [MessageFuture() for _ in range(BATCH)]
            _Reader.batch = batch
            resolve_all(batch, list(range(BATCH)))
            _Reader.batch = []
            assert [future.result(0) for future in batch] == list(range(BATCH))
    finally:
        gc.callbacks.remove(_on_gc)
    return _Reader.reads


if __name__ == "__main__":
    print(main(int(sys.argv[1])))
