"""actors: an actor kernel on pykka threads and multiprocessing processes."""

from actors import errors
from actors._actor import Actor
from actors._dead_letters import DeadLetter
from actors._events import Event
from actors._pool import Pool
from actors._ref import Ref
from actors._spec import Backoff, ChildSpec, SupervisorSpec
from actors._status import ActorStatus
from actors._system import ActorSystem

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
]
