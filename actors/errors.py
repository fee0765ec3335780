"""Errors raised by the actor kernel.

Every error pickles (it may cross a process boundary): each keeps the arguments it
was built with in ``args`` and builds its text in ``__str__``.

    ActorError
    ├── ActorDeadError               (also pykka.ActorDeadError) the actor is stopped
    ├── AskTimeoutError              (also TimeoutError) no reply within the ask's timeout
    ├── ActorNotFoundError           (also LookupError) no actor of that name
    ├── NameTakenError               (also ValueError) the name is in use
    ├── MessageNotSerializableError  (also TypeError) a message to a process actor did not pickle
    ├── SpawnError                   the actor could not be created or started
    ├── RestartLimitError            a supervisor gave up after too many restarts
    └── WorkerCrashedError           the process hosting the actor died before replying
"""

from __future__ import annotations

import pykka

__all__ = [
    "ActorDeadError",
    "ActorError",
    "ActorNotFoundError",
    "AskTimeoutError",
    "MessageNotSerializableError",
    "NameTakenError",
    "RestartLimitError",
    "SpawnError",
    "WorkerCrashedError",
]


class ActorError(Exception):
    """Root of every error raised by `actors`."""


class ActorDeadError(ActorError, pykka.ActorDeadError):
    """The actor is stopped: an ask to it can never be answered.

    Also a ``pykka.ActorDeadError``, so pykka code that catches that keeps working.

    Args:
        name: the actor's name.
        detail: optional extra text.
    """

    def __init__(self, name: str = "", detail: str = "") -> None:
        super().__init__(name, detail)

    def __str__(self) -> str:
        name, detail = self.args
        text = f"actor {name!r} is not running"
        return f"{text}: {detail}" if detail else text


class AskTimeoutError(ActorError, TimeoutError):
    """An ask got no reply within its timeout."""

    def __init__(self, name: str = "", timeout: float | None = None) -> None:
        super().__init__(name, timeout)

    def __str__(self) -> str:
        name, timeout = self.args
        return f"ask to actor {name!r} timed out after {timeout}s"


class ActorNotFoundError(ActorError, LookupError):
    """No actor with that name exists in the system."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)

    def __str__(self) -> str:
        return f"no actor named {self.args[0]!r}"


class NameTakenError(ActorError, ValueError):
    """The name is already used by another actor of the system."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)

    def __str__(self) -> str:
        return f"actor name {self.args[0]!r} is already taken"


class MessageNotSerializableError(ActorError, TypeError):
    """A message for a process actor could not be pickled; nothing was sent."""

    def __init__(self, name: str = "", reason: str = "") -> None:
        super().__init__(name, reason)

    def __str__(self) -> str:
        name, reason = self.args
        return f"message to actor {name!r} cannot be pickled: {reason}"


class SpawnError(ActorError):
    """The actor could not be created or started."""

    def __init__(self, name: str = "", reason: str = "") -> None:
        super().__init__(name, reason)

    def __str__(self) -> str:
        name, reason = self.args
        return f"could not start actor {name!r}: {reason}"


class RestartLimitError(ActorError):
    """A supervisor saw more than ``max_restarts`` restarts within ``within`` seconds."""

    def __init__(self, name: str = "", max_restarts: int = 0, within: float = 0.0) -> None:
        super().__init__(name, max_restarts, within)

    def __str__(self) -> str:
        name, max_restarts, within = self.args
        return (
            f"supervisor {name!r} gave up: more than {max_restarts} restarts "
            f"within {within}s"
        )


class WorkerCrashedError(ActorError):
    """The process hosting the actor died before it answered.

    Args:
        name: the actor's name.
        exitcode: the process's exit code (negative: the signal that ended it).
        started: False when the message was still waiting behind the one the process
            was handling: no handler ever ran on it (a `Pool` sends it to another member).
    """

    def __init__(self, name: str = "", exitcode: int | None = None, started: bool = True) -> None:
        super().__init__(name, exitcode, started)

    @property
    def started(self) -> bool:
        """Whether the process may have begun handling the message."""
        return bool(self.args[2])

    def __str__(self) -> str:
        name, exitcode, started = self.args
        text = f"process of actor {name!r} died (exit code {exitcode})"
        return text if started else f"{text} before it took the message"
