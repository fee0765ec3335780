"""The wire-level message that Publishers, the broker and the Spark sink carry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

__all__ = ["NO_ATTRIBUTES", "Message", "checked_attributes", "new_message", "parts_of"]


class _NoAttributes(dict[str, str]):
    """An empty attributes dict that refuses changes: one shared by every message
    published without attributes.

    A fresh ``{}`` per message would be one more object per message for the garbage
    collector to walk while the message is in flight. Being shared, it must not change: every mutator raises
    `TypeError`. It copies and pickles as a plain empty dict, and what leaves the
    process carries a plain ``{}`` instead (`Message` pickles so; so do dead letters):
    a peer's restricted unpickler, such as the broker's, reads no ``builtins.dict``.
    """

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("the attributes of a message published without any are read-only")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[()]]:
        return dict, ()

    def __copy__(self) -> dict[str, str]:
        return {}

    def __deepcopy__(self, memo: Any) -> dict[str, str]:
        return {}


NO_ATTRIBUTES: dict[str, str] = _NoAttributes()
"""The attributes of every message published through a Publisher without any."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """A published message: bytes plus string attributes (Pub/Sub style).

    ``message_id`` and ``publish_time`` are assigned by the topic when it accepts
    the message; before that they are ``""`` and ``0.0``.
    """

    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    ordering_key: str | None = None
    message_id: str = ""
    publish_time: float = 0.0

    def __getstate__(self) -> tuple[bytes, dict[str, str], str | None, str, float]:
        # Pickled as a plain tuple: dataclasses' own slots state walks fields() per
        # message, which dominated pickling worker batches. The shared read-only empty
        # attributes leave as a plain dict: a peer (the broker's allow-list) reads no other.
        attributes = self.attributes
        if attributes.__class__ is not dict:
            attributes = dict(attributes)
        return (self.data, attributes, self.ordering_key, self.message_id, self.publish_time)

    def __setstate__(self, state: tuple[bytes, dict[str, str], str | None, str, float]) -> None:
        for setter, value in zip(_SETTERS, state, strict=True):
            setter(self, value)

    @property
    def size(self) -> int:
        """Bytes counted by batching and flow control: data plus UTF-8 attributes."""
        return len(self.data) + sum(
            len(k.encode()) + len(v.encode()) for k, v in self.attributes.items()
        )


_new = object.__new__
_SETTERS = tuple(
    Message.__dict__[name].__set__
    for name in ("data", "attributes", "ordering_key", "message_id", "publish_time")
)
_set_data, _set_attributes, _set_key, _set_id, _set_time = _SETTERS


def new_message(data: bytes, attributes: dict[str, str], ordering_key: str | None,
                message_id: str = "", publish_time: float = 0.0) -> Message:
    """Build a `Message` from values already validated, on the per-message hot path.

    Sets the slots directly instead of going through the frozen dataclass ``__init__``
    (which pays ``object.__setattr__`` per field). The result is an ordinary, immutable
    `Message`, equal to one built by ``Message(...)``.
    """
    message = _new(Message)
    _set_data(message, data)
    _set_attributes(message, attributes)
    _set_key(message, ordering_key)
    _set_id(message, message_id)
    _set_time(message, publish_time)
    return message


def parts_of(messages: list[Message]) -> tuple[list[bytes], list[dict[str, str]], list[str | None]]:
    """The parallel lists (data, attributes, ordering key) a topic publishes a batch from.

    An empty ordering key is no key.
    """
    return (
        [m.data for m in messages], [m.attributes for m in messages],
        [m.ordering_key or None for m in messages],
    )


def checked_attributes(attributes: object) -> dict[str, str]:
    """A copy of a publish's ``attributes`` (None: none), checked: a mapping of `str` to
    `str`. The copy is the message's own: the caller may change theirs afterwards.

    Raises:
        TypeError: ``attributes`` is not a mapping, or a key or value is not a `str`
            (the message names the first one).
    """
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise TypeError(
            f"attributes must be a mapping of str to str, got {type(attributes).__qualname__}")
    copied = dict(attributes)
    for name, value in copied.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"attributes must map str to str, got {name!r}: {value!r}")
    return copied
