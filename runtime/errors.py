"""Errors raised by the topic runtime.

Every error pickles (it may cross a process or the broker endpoint): each keeps the
arguments it was built with in ``args`` and builds its text in ``__str__``.

    BusError
    ├── TopicNotFoundError       (also LookupError) no topic of that name
    ├── TopicExistsError         (also ValueError) the name is taken
    ├── InvalidSettingsError     (also ValueError) a setting is out of range; names the setting
    │   └── UnsupportedPolicyError   the backend cannot honour that policy value
    ├── TopicClosedError         (also RuntimeError) the topic is closed
    ├── MessageTypeError         (also TypeError) the message is not of the topic's type
    ├── SettlementError          (also RuntimeError) the delivery was already settled
    ├── WouldBlock               a non-blocking call (or a bounded wait) could not proceed
    ├── BackendUnavailableError  (also ConnectionError) a topic's backend (Redis) is unreachable
    ├── PublishError             a Publisher refused or failed a message; ``.code`` is gRPC's
    │   ├── FlowControlError         code 8: flow-control limits exceeded
    │   └── OrderingKeyPausedError   code 9: the ordering key is paused after a failure
    └── BrokerTimeoutError       (also TimeoutError) no connection or handshake in time; names
                                 the broker's address
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "BrokerTimeoutError",
    "BusError",
    "FlowControlError",
    "InvalidSettingsError",
    "MessageTypeError",
    "OrderingKeyPausedError",
    "PublishError",
    "SettlementError",
    "TopicClosedError",
    "TopicExistsError",
    "TopicNotFoundError",
    "UnsupportedPolicyError",
    "WouldBlock",
]


class BusError(Exception):
    """Root of every error raised by `runtime`."""


class TopicNotFoundError(BusError, LookupError):
    """No topic with that name exists on the bus."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)

    def __str__(self) -> str:
        return f"no topic named {self.args[0]!r}"


class TopicExistsError(BusError, ValueError):
    """A topic with that name already exists on the bus."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)

    def __str__(self) -> str:
        return f"topic {self.args[0]!r} already exists"


class InvalidSettingsError(BusError, ValueError):
    """A setting is missing, of the wrong type or out of range.

    Args:
        setting: the name of the offending setting.
        detail: what is wrong with it.
    """

    def __init__(self, setting: str = "", detail: str = "") -> None:
        super().__init__(setting, detail)

    @property
    def setting(self) -> str:
        """The name of the offending setting."""
        return str(self.args[0])

    def __str__(self) -> str:
        setting, detail = self.args
        return f"invalid setting {setting!r}: {detail}"


class UnsupportedPolicyError(InvalidSettingsError):
    """The topic's backend cannot honour a policy value."""

    def __init__(self, setting: str = "", value: str = "", backend: str = "") -> None:
        BusError.__init__(self, setting, value, backend)

    def __str__(self) -> str:
        setting, value, backend = self.args
        return f"backend {backend!r} does not support policy {setting}={value!r}"


class TopicClosedError(BusError, RuntimeError):
    """The topic is closed: nothing more can be published or subscribed."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name)

    def __str__(self) -> str:
        return f"topic {self.args[0]!r} is closed"


class MessageTypeError(BusError, TypeError):
    """The message is not an instance of the topic's ``message_type``.

    Args:
        topic: the topic's name.
        expected: the qualified name of the expected type.
        actual: the qualified name of the message's type.
    """

    def __init__(self, topic: str = "", expected: str = "", actual: str = "") -> None:
        super().__init__(topic, expected, actual)

    def __str__(self) -> str:
        topic, expected, actual = self.args
        return f"topic {topic!r} takes {expected} messages, got {actual}"


class SettlementError(BusError, RuntimeError):
    """The delivery was already settled (acked, nacked, timed out or closed)."""

    def __init__(self, message_id: str = "", state: str = "") -> None:
        super().__init__(message_id, state)

    def __str__(self) -> str:
        message_id, state = self.args
        return f"delivery of message {message_id!r} is already settled ({state})"


class WouldBlock(BusError):
    """The call would have to wait (or its bounded wait ran out)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)

    def __str__(self) -> str:
        return str(self.args[0]) or "the operation would block"


class BackendUnavailableError(BusError, ConnectionError):
    """The backend of a topic (the Redis of a ``backend="redis"`` topic) did not answer.

    Args:
        url: where the backend was expected (credentials left out).
        detail: what went wrong.
    """

    def __init__(self, url: str = "", detail: str = "") -> None:
        super().__init__(url, detail)

    def __str__(self) -> str:
        url, detail = self.args
        return f"backend at {url} is unavailable: {detail}" if detail else (
            f"backend at {url} is unavailable")


class PublishError(BusError):
    """A Publisher refused or failed a message. ``code`` follows gRPC's numbering.

    Args:
        message: the error text.
        code: the gRPC status code (3 invalid argument, 8 resource exhausted,
            9 failed precondition, 2 unknown).
    """

    def __init__(self, message: str = "", code: int = 2) -> None:
        super().__init__(message, code)

    @property
    def code(self) -> int:
        """The gRPC status code."""
        return int(self.args[1])

    def __str__(self) -> str:
        return str(self.args[0])


class FlowControlError(PublishError):
    """Flow-control limits were exceeded (code 8)."""

    def __init__(
        self, message: str = "Flow control: max outstanding messages exceeded", code: int = 8
    ) -> None:
        super().__init__(message, code)


class OrderingKeyPausedError(PublishError):
    """The ordering key is paused after a failure (code 9) until ``resume_publish``."""

    def __init__(self, key: str = "", code: int = 9) -> None:
        super().__init__(key, code)

    @property
    def key(self) -> str:
        """The paused ordering key."""
        return str(self.args[0])

    def __str__(self) -> str:
        return f"Publishing paused for ordering key: {self.args[0]}"


class BrokerTimeoutError(BusError, TimeoutError):
    """A broker did not answer in time: nothing accepted the connection, no handshake,
    or no reply to a call.

    Args:
        address: the broker's ``host:port``.
        detail: what did not happen in time.
    """

    def __init__(self, address: str = "", detail: str = "") -> None:
        super().__init__(address, detail)

    def __str__(self) -> str:
        address, detail = self.args
        return f"broker at {address}: {detail or 'timed out'}"
