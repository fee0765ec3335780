"""Process actors: an actor hosted in its own OS process, and the pipe between.

- ``_cell``: the parent's side of a process actor (spawn, tell/ask, crash detection).
- ``_child``: the child's main loop.
- ``_wire``: the process wire protocol (frame kinds, exit codes, encoding).
- ``_channel``: a batched, bounded pipe writer and its framing.
- ``_io``: the one I/O and reaper thread per system that waits on every pipe and sentinel.
- ``_affinity``: `pin_threads`, this process's threads on one CPU and its process actors on
  the CPUs it had.
"""
