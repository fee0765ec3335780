"""A plain class the Redis tests allow across (importable by name in every process)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Order:
    """An order line."""

    sku: str
    quantity: int
