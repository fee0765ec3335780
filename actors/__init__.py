"""actors: an actor kernel on pykka threads and multiprocessing processes.

- ``_actor``, ``_thread_cell``, ``_cell``, ``_ref``: the actor, its mailbox and its stable handle.
- ``_pykka``: pykka's proxies and ``self.actor_ref`` over that mailbox.
- ``_system`` (the public face) and ``_kernel`` (names, cells, process plumbing).
- ``_supervisor``, ``_spec``, ``_scheduler``: OTP supervision, its specs, backoff timers.
- ``_pool``, ``_events``, ``_dead_letters``, ``_status``: pools, lifecycle events, dead letters,
  ``status()``.
- ``process``: actors hosted in their own OS process (child, pipe, wire protocol), and
  ``pin_threads`` (this process's threads on one CPU, its process actors on all).
"""

from actors import errors
from actors._actor import Actor
from actors._dead_letters import DeadLetter
from actors._events import Event
from actors._pool import Pool
from actors._ref import Ref
from actors._spec import Backoff, ChildSpec, SupervisorSpec
from actors._status import ActorStatus
from actors._system import ActorSystem
from actors.process._affinity import pin_threads, unpin_threads

__all__ = [
    "Actor",
    "ActorStatus",
    "ActorSystem",
    "Backoff",
    "ChildSpec",
    "DeadLetter",
    "Event",
    "Pool",
    "Ref",
    "SupervisorSpec",
    "errors",
    "pin_threads",
    "unpin_threads",
]
