"""actors: an actor kernel on pykka threads and multiprocessing processes."""

from . import errors
from ._actor import Actor
from ._dead_letters import DeadLetter
from ._events import Event
from ._pool import Pool
from ._ref import Ref
from ._spec import Backoff, ChildSpec, SupervisorSpec
from ._status import ActorStatus
from ._system import ActorSystem

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
