"""Limits (docs/sessions.md): persisted at creation, validated, never weakened by a patch.

``Limits`` is the one table of limits: a frozen dataclass whose fields are their names, types
and defaults; ``DEFAULTS`` is the same table as a mapping. Every reader goes through the typed
attributes (``limits.context_bytes``), never through dict keys.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

MAX_LIMIT = 10**15  # far beyond any useful limit; keeps every value an exact JSON number


@dataclass(frozen=True)
class Limits:
    """Every limit, typed, the defaults where none was given: ``Limits(rounds=7)``, read as
    attributes (``limits.rounds``). Values are checked and converted (``"7"`` is 7) when a
    Limits is made; ``with_value`` and ``with_assignments`` give checked copies."""

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

    def __post_init__(self) -> None:
        for item in fields(self):
            object.__setattr__(self, item.name, _checked(item.name, getattr(self, item.name)))

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_dict().items() if v != DEFAULTS[k]}
        return f"Limits({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Limits:
        """Limits from a mapping; names it does not give keep their defaults (so a Session
        created before a limit existed gets that limit's default)."""
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown limit(s): {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Limits:
        """Limits as a Session stored them: checked when the Session was made (and when an
        artifact carrying it was restored), so read back without checking them again, as
        every admission and every Turn does."""
        made = object.__new__(cls)
        made.__dict__.update(DEFAULTS, **data)  # frozen: no attribute is set after this
        return made

    def with_value(self, name: str, value: Any) -> Limits:
        """A copy with one limit set; raises ValueError naming the problem."""
        if name not in DEFAULTS:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(sorted(DEFAULTS))}")
        return replace(self, **{name: value})

    def with_assignments(self, assignments: list[str]) -> Limits:
        """Apply ``NAME=VALUE`` strings (the CLI's ``--limit``)."""
        limits = self
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--limit expects NAME=VALUE, got {item!r}")
            limits = limits.with_value(name.strip(), value.strip())
        return limits


# The one table of limits: names, defaults and (by the default's type) whether a limit
# counts whole things or measures a quantity.
DEFAULTS: dict[str, int | float] = {f.name: f.default for f in fields(Limits)}  # type: ignore[misc]


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
