"""Limits (docs/sessions.md): persisted at creation, validated, never weakened by a patch.

``DEFAULTS`` is the one table of limits: their names, their defaults, and (by the default's
type) whether a limit counts whole things or measures a quantity. ``Limits`` is an immutable,
validated set of them.
"""

from __future__ import annotations

import math
from typing import Any

MAX_LIMIT = 10**15  # far beyond any useful limit; keeps every value an exact JSON number

DEFAULTS: dict[str, int | float] = {
    "rounds": 100,
    "tokens": 2_000_000,
    "cost_usd": 10.0,
    "model_attempts": 3,
    "execution_seconds": 600.0,
    "context_bytes": 160_000,
    "output_bytes": 16_000,
    "pending_cells": 32,
    "inbox_messages": 256,
    "storage_bytes": 256_000_000,
    "flush_seconds": 0.1,
    "provider_retry_seconds": 900.0,
}


class Limits:
    """Every limit, the defaults where none was given. ``Limits(rounds=7)``; read one as an
    attribute (``limits.rounds``); ``with_value`` and ``with_assignments`` give copies."""

    __slots__ = ("_values",)

    def __init__(self, **values: Any) -> None:
        checked = dict(DEFAULTS)
        for name, value in values.items():
            checked[name] = _checked(name, value)
        object.__setattr__(self, "_values", checked)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Limits are immutable: use with_value")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != DEFAULTS[k]}
        return f"Limits({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        """Limits from a mapping; names it does not give keep their defaults (so a Session
        created before a limit existed gets that limit's default)."""
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown limit(s): {', '.join(unknown)}")
        return cls(**data)

    def with_value(self, name: str, value: Any) -> Limits:
        """A copy with one limit set; raises ValueError naming the problem."""
        return Limits(**{**self._values, name: value})

    def with_assignments(self, assignments: list[str]) -> Limits:
        """Apply ``NAME=VALUE`` strings (the CLI's ``--limit``)."""
        limits = self
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--limit expects NAME=VALUE, got {item!r}")
            limits = limits.with_value(name.strip(), value.strip())
        return limits


def _checked(name: str, value: Any) -> int | float:
    """``value`` as limit ``name`` takes it, or ValueError naming the problem."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown limit {name!r}; known: {', '.join(sorted(DEFAULTS))}")
    want_int = isinstance(DEFAULTS[name], int)
    try:
        number: int | float = int(value) if want_int else float(value)
        if want_int and isinstance(value, float) and value != int(value):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if want_int else "a number"
        raise ValueError(f"limit {name} must be {kind}, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or not number > 0:
        raise ValueError(f"limit {name} must be a positive finite number, got {value!r}")
    if number > MAX_LIMIT:
        raise ValueError(f"limit {name} must be at most {MAX_LIMIT}, got {value!r}")
    return number
