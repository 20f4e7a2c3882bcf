"""Limits (SPEC §9): persisted at creation, validated, never weakened by a patch."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

MAX_LIMIT = 10**15  # far beyond any useful limit; keeps every value an exact JSON number


@dataclass(frozen=True)
class Limits:
    rounds: int = 100
    tokens: int = 2_000_000
    cost_usd: float = 10.0
    model_attempts: int = 3
    execution_seconds: float = 600.0
    context_bytes: int = 160_000
    output_bytes: int = 16_000
    pending_cells: int = 32
    inbox_messages: int = 256
    storage_bytes: int = 256_000_000
    flush_seconds: float = 0.1
    provider_retry_seconds: float = 900.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        """Limits from a mapping; names it does not give keep their defaults (so a Session
        created before a limit existed gets that limit's default)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown limit(s): {', '.join(unknown)}")
        limits = cls()
        for name, value in data.items():
            limits = limits.with_value(name, value)
        return limits

    def with_value(self, name: str, value: Any) -> Limits:
        """A copy with one limit set; raises ValueError naming the problem."""
        types = {f.name: f.type for f in fields(self)}
        if name not in types:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(sorted(types))}")
        want_int = types[name] in ("int", int)
        try:
            number: float = int(value) if want_int else float(value)
            if want_int and isinstance(value, float) and value != int(value):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            kind = "an integer" if want_int else "a number"
            raise ValueError(f"limit {name} must be {kind}, got {value!r}") from None
        if isinstance(value, bool) or not math.isfinite(number) or not number > 0:
            raise ValueError(f"limit {name} must be a positive finite number, got {value!r}")
        if number > MAX_LIMIT:
            raise ValueError(f"limit {name} must be at most {MAX_LIMIT}, got {value!r}")
        changes: dict[str, Any] = {name: number}
        return replace(self, **changes)

    def with_assignments(self, assignments: list[str]) -> Limits:
        """Apply ``NAME=VALUE`` strings (the CLI's ``--limit``)."""
        limits = self
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--limit expects NAME=VALUE, got {item!r}")
            limits = limits.with_value(name.strip(), value.strip())
        return limits
