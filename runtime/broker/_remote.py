"""`RemoteBus`: a served bus seen from another process, mirroring `Bus` where it can."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from runtime.broker._client import DEFAULT_CONNECT_TIMEOUT, Address, Channel, authkey_bytes
from runtime.broker._protocol import plain_message, wire_types
from runtime.broker._remote_subscription import RemotePullSubscription
from runtime.broker._wire import DEFAULT_MAX_FRAME_SIZE
from runtime.core._message import Message, new_message
from runtime.core._settings import check_timeout
from runtime.core.settlement._dead_letters import DeadLetter
from runtime.errors import BrokerTimeoutError

__all__ = ["RemoteBus", "RemoteTopic", "connect"]

_PUBLISH_MARGIN = 60.0
# The wait for room a remote Publisher's batch gets at the broker by default (the
# server's own ``publish_timeout`` caps it).
DEFAULT_BATCH_TIMEOUT = 60.0
# How long past a batch's wait for room its Publisher waits for the broker's answer (the
# broker answers once that wait ended): the call's and the answer's way across. Longer
# rides out a slower link; shorter gives up sooner on a broker that stopped answering.
ANSWER_GRACE = 10.0


class RemoteBus:
    """A connection to a `BusServer` (see `runtime.connect`); thread-safe.

    Values crossing the wire are builtins, the `datetime` types, `Decimal`, `UUID`, the
    runtime's own message types and the plain classes both sides list in ``allow``. A
    call carrying anything else, or a frame over ``max_frame_size``, fails alone with
    `NotTransferableError` (a `MessageNotSerializableError`, so a `TypeError`) naming
    the type or the size; the connection stays usable. Every pull subscription and
    every publisher opens a connection of its own; `close()` closes them all.

    Raises:
        multiprocessing.AuthenticationError: the key is wrong.
        ConnectionError: the server is unreachable or full.
        TypeError: a bad key or ``allow`` entry.
    """

    def __init__(
        self, address: Address | str, *, authkey: bytes | str, allow: Iterable[type] = (),
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self._registry = wire_types(allow)
        self._connect_args = (address, authkey_bytes(authkey), connect_timeout, max_frame_size)
        self._channel = self._open(reconnect=True)
        self.address = self._channel.address
        self._lock = threading.Lock()
        self._children: list[Any] = []  # subscriptions, publishers, channels: closed with us
        self._system: Any = None
        self._closed = False

    def topic(self, name: str) -> RemoteTopic:
        """A handle on topic ``name`` (raises `TopicNotFoundError` when it is not served)."""
        self._channel.call("stats", name)
        return RemoteTopic(self, name)

    def topics(self) -> list[str]:
        """The served topic names."""
        return list(self._channel.call("topics"))

    def stats(self) -> dict[str, Any]:
        """``TopicStats`` of every served topic, by name."""
        return dict(self._channel.call("stats", None))

    def held_by(self) -> dict[str, str]:
        """``Bus.held_by()`` on the server: what holds each held topic, named."""
        return dict(self._channel.call("held_by"))

    def publish(self, name: str, message: object, **kwargs: Any) -> str:
        """``topic(name).publish(message, ...)``; returns the message id."""
        return RemoteTopic(self, name).publish(message, **kwargs)

    def dead_letters(self, name: str) -> RemoteDeadLetters:
        """Topic ``name``'s dead letters on the server (raises `TopicNotFoundError`)."""
        self._channel.call("stats", name)
        return RemoteDeadLetters(self._channel, name)

    def close(self) -> None:
        """Close every publisher (flushing it), subscription and connection; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children, self._children = self._children, []
            system, self._system = self._system, None
        for child in reversed(children):
            _close(child)
        if system is not None:
            system.shutdown()
        self._channel.close()

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def _open(self, *, reconnect: bool = False) -> Channel:
        address, authkey, connect_timeout, max_frame_size = self._connect_args
        return Channel(address, authkey, connect_timeout=connect_timeout, max_frame_size=max_frame_size,
                       registry=self._registry, reconnect=reconnect)

    def _adopt(self, child: Any) -> None:
        with self._lock:
            if self._closed:
                _close(child)
                raise ConnectionError("the RemoteBus is closed")
            self._children.append(child)

    def _actor_system(self) -> Any:
        from actors import ActorSystem

        with self._lock:
            if self._system is None:
                self._system = ActorSystem("actorbus-remote")
            return self._system

    def __enter__(self) -> RemoteBus:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RemoteBus {self.address[0]}:{self.address[1]}{' closed' if self._closed else ''}>"


class RemoteTopic:
    """A served topic: ``publish``, ``publisher``, ``subscription``, ``stats``."""

    def __init__(self, bus: RemoteBus, name: str) -> None:
        self._bus = bus
        self.name = name

    def publish(
        self, message: object, *, key: str | None = None, attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Publish one message through the topic's publish path; returns its id.

        Blocks like ``Topic.publish`` (``timeout`` bounds backpressure); raises what it
        raises (`TopicClosedError`, `MessageTypeError`, `WouldBlock`, ...).

        Raises:
            TypeError, ValueError: ``timeout`` is not a finite number or None, ``key``
                not a `str` or None, ``attributes`` not a mapping of `str` to `str`
                (checked before anything is sent: nothing is published).
        """
        check_timeout("timeout", timeout)
        _check_key_and_attributes(key, attributes)
        reply_timeout = None if timeout is None else max(timeout, 0.0) + _PUBLISH_MARGIN
        return str(self._bus._channel.call(
            "publish", self.name, plain_message(message), key,
            dict(attributes) if attributes else None, timeout, timeout=reply_timeout))

    def publisher(self, *, publish_timeout: float = DEFAULT_BATCH_TIMEOUT, **options: Any) -> Any:
        """A `Publisher` batching on this side; each batch crosses as one frame.

        Takes the options of ``Topic.publisher`` (``batching``, ``flow_control``,
        ``message_ordering``), and ``publish_timeout``: how long the broker's topic may
        hold one batch waiting for room (``max_pending``, a full group; the server's
        own ``publish_timeout`` caps it). A batch still waiting then publishes the
        messages before the one it waited for; their futures resolve with their ids,
        the rest fail with `WouldBlock` and are never published. Its actor runs in an
        actor system the `RemoteBus` owns.

        Raises:
            TypeError, ValueError: ``publish_timeout`` is not a finite number > 0.
        """
        from runtime.publisher._publisher import Publisher

        check_timeout("publish_timeout", publish_timeout)
        if publish_timeout is None or publish_timeout <= 0:
            raise ValueError(f"publish_timeout must be a number of seconds > 0, got {publish_timeout!r}")
        channel = self._bus._open(reconnect=True)
        self._bus._adopt(channel)
        path = _BatchPath(self.name, channel, publish_timeout)
        publisher = Publisher(path, system=self._bus._actor_system(), **options)
        self._bus._adopt(publisher)
        return publisher

    def subscription(self, *, group: str | None = None) -> RemotePullSubscription:
        """A pull subscription: a member of ``group``, or a broadcast subscriber."""
        channel = self._bus._open()
        try:
            subscription = RemotePullSubscription(channel, self.name, group)
        except BaseException:
            channel.close()
            raise
        self._bus._adopt(subscription)
        return subscription

    def stats(self) -> Any:
        """The topic's ``TopicStats``."""
        return self._bus._channel.call("stats", self.name)

    def __repr__(self) -> str:
        return f"<RemoteTopic {self.name!r}>"


class RemoteDeadLetters:
    """A served topic's dead letters: ``len()``, iteration (a snapshot, oldest first),
    ``drain()`` and ``replay()`` like `DeadLetterQueue`. Each call is one round trip;
    dead letters whose message is not a wire type (builtins, `Message`) cannot cross."""

    def __init__(self, channel: Channel, name: str) -> None:
        self._channel = channel
        self._name = name

    def __len__(self) -> int:
        return len(self._channel.call("dead_letters", self._name))

    def __iter__(self) -> Iterator[DeadLetter]:
        return iter(self._channel.call("dead_letters", self._name))

    def drain(self) -> list[DeadLetter]:
        """Empty the queue on the server; returns what it held, oldest first.

        Nothing leaves the server before this side holds it: the server sends the
        letters, and removes exactly those once this side confirms it decoded them. A
        drain that fails (the reply did not cross, the connection broke) raises and
        leaves every letter on the server; letters dead-lettered meanwhile stay there.
        """
        ticket, letters = self._channel.call("drain_dead_letters", self._name)
        self._channel.call("confirm_drain", ticket)
        return list(letters)

    def replay(self, *, topic: str | None = None) -> int:
        """Republish every dead letter (to ``topic``, default the same one); the count."""
        return int(self._channel.call("replay_dead_letters", self._name, topic))


class _BatchPath:
    """The seam a `Publisher` sends batches through (`_publish_batches`, as to a local
    topic): one ``publish_batch`` call per batch, each resolved by the broker's answer.

    The broker and this side cannot disagree on a message: this side never decides a
    batch on its own clock while the broker could still publish it, so a future fails
    only where the broker said its message was not published, or where no word came at
    all (last point).

    - The call carries ``publish_timeout``. The broker's topic stops waiting for room
      that long after the broker read the call (`Topic._publish_batches`' deadline; a
      batch the topic has not started on by then is cancelled), and the broker then
      answers with every message's outcome: the ids of the published prefix, the error
      of the rest. Nothing of the batch enters the topic after that.
    - This side waits for the answer ``publish_timeout + grace`` from sending:
      the broker's deadline started later than its own, by the call's way across, and
      the answer takes its way back; the grace covers both.
    - Only when no answer comes even then (a dead link, a broker that stopped) does this
      side fail the batch without the broker's word: `BrokerTimeoutError`, saying the
      outcome is unknown; the connection is dropped. A connection that breaks
      mid-call fails it the same way (`ConnectionError`).

    Args:
        name: the served topic.
        channel: the Publisher's own connection.
        publish_timeout: the wait for room each batch may have at the broker.
        grace: how long past ``publish_timeout`` the answer is waited for (`ANSWER_GRACE`).
    """

    def __init__(
        self, name: str, channel: Channel, publish_timeout: float = DEFAULT_BATCH_TIMEOUT,
        grace: float = ANSWER_GRACE,
    ) -> None:
        self.name = name
        self._channel = channel
        self._publish_timeout = publish_timeout
        self._grace = grace

    def _publish_batches(
        self, parts: Sequence[tuple[list[bytes], list[dict[str, str]], Sequence[str | None]]],
    ) -> Future[list[tuple[Sequence[str] | None, BaseException | None]]]:
        """Publish each batch with one call to the broker (blocks for the answers); a done
        future of their outcomes, in order."""
        outcomes: list[tuple[Sequence[str] | None, BaseException | None]] = []
        for datas, attributes, keys in parts:
            outcomes.append(self._publish(list(map(new_message, datas, attributes, keys))))
        future: Future[list[tuple[Sequence[str] | None, BaseException | None]]] = Future()
        future.set_result(outcomes)
        return future

    def _publish(self, messages: list[Message]) -> tuple[Sequence[str] | None, BaseException | None]:
        """One batch's outcome: ``(ids, None)``, ``(prefix ids, error)`` or ``(None, error)``."""
        timeout, waited = self._publish_timeout, self._publish_timeout + self._grace
        try:
            ids, error = self._channel.call("publish_batch", self.name, messages, timeout, timeout=waited)
        except BrokerTimeoutError as exc:
            return None, BrokerTimeoutError(
                exc.args[0], f"no answer to a batch of {len(messages)} messages within "
                f"{waited}s: whether the broker published them is unknown")
        except Exception as exc:
            return None, exc
        if error is None:
            return ids, None
        return (ids or None), error


def _check_key_and_attributes(key: object, attributes: object) -> None:
    """Refuse what the topic would refuse, before sending (the core says the same)."""
    if key is not None and not isinstance(key, str):
        raise TypeError(f"key must be a str or None, got {type(key).__qualname__}")
    if attributes is None:
        return
    if not isinstance(attributes, Mapping):
        raise TypeError(f"attributes must be a mapping of str to str, got {type(attributes).__qualname__}")
    for name, value in attributes.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("attributes must be a mapping of str to str, got "
                            f"{type(name).__qualname__} -> {type(value).__qualname__}")


def _close(child: Any) -> None:
    try:
        if isinstance(child, RemotePullSubscription):
            child.unsubscribe()
        else:
            child.close()
    except Exception:  # closing is best effort: the server may be gone already
        pass


def connect(address: Address | str, *, authkey: bytes | str, **options: Any) -> RemoteBus:
    """Connect to a bus served with ``Bus.serve``; returns a `RemoteBus`.

    Blocks until the HMAC challenge passed (at most ``connect_timeout`` seconds).
    ``authkey``: bytes, or a `str` meaning its UTF-8 bytes. Options: ``allow`` (plain
    classes that may cross, as given to ``serve``), ``connect_timeout``, ``max_frame_size``.

    Raises:
        multiprocessing.AuthenticationError: the key is wrong.
        ConnectionError: the server is unreachable or full.
    """
    return RemoteBus(address, authkey=authkey, **options)
