"""What a Session's ``session_created`` event fixes, as one frozen value (docs/design.md,
"Settings: what a Session fixes"): the working directory, the validators, the Limits, the
credentials Cells may see (``pass_env``), the more variables to treat as secrets, and the
Cells' network (docs/network.md).

``rio-ci new``, ``.github/rio.yml`` and the action build a :class:`Settings`; the Session writes
it once, in its first event, and reads it back from there. Nothing else stores it, so no patch
and no later job can widen it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rio_ci.core.events import NetworkSettings, SessionCreated
from rio_ci.core.limits import Limits
from rio_ci.egress.policy import Mode, Policy, parse_mode

__all__ = ["OLD_NETWORK", "Network", "Settings"]


@dataclass(frozen=True)
class Network:
    """The Cells' network: a mode (``allowlist``, ``open``, ``none``) and every pattern the
    proxy reads, the default list already in it under ``allowlist`` (fixed when the Session
    is created, so a later rio-ci with another default list changes nothing of it)."""

    mode: Mode = "open"
    allow: tuple[str, ...] = ()

    @classmethod
    def asked(cls, mode: str, extra: Iterable[str] = ()) -> Network:
        """The network ``--network MODE --allow-host PATTERN…`` (or ``network: {mode,
        allow}``) asks for: under ``allowlist`` the default list, then ``extra``; in the
        other modes ``extra`` alone (under ``open`` a pattern still lets a special address
        through). UsageError (one line) for a bad mode or pattern."""
        from rio_ci.egress import default_allow  # reads a data file: only when asked

        policy = Policy.of(parse_mode(mode), extra)
        defaults = default_allow.patterns() if policy.mode == "allowlist" else ()
        shown = dict.fromkeys(str(p) for p in (*defaults, *policy.patterns))
        return cls(policy.mode, tuple(shown))

    @classmethod
    def stored(cls, data: Mapping[str, Any] | None) -> Network:
        """The network a ``session_created`` event fixed; a Session created before rio-ci had
        one (no ``network`` there: None) has ``OLD_NETWORK``."""
        if data is None:
            return OLD_NETWORK
        return cls(parse_mode(str(data["mode"])), tuple(str(p) for p in data.get("allow", [])))

    def policy(self) -> Policy:
        return Policy.of(self.mode, self.allow)

    def to_dict(self) -> NetworkSettings:
        return {"mode": self.mode, "allow": list(self.allow)}


# Before Cells had a network of their own they reached every host: ``open`` is that, now
# through the proxy and on the record (docs/network.md, "Sessions from before").
OLD_NETWORK = Network("open", ())


@dataclass(frozen=True)
class Settings:
    """Everything ``session_created`` fixes beside the goal and the Session's id. ``cwd``
    None: the current directory, resolved when the Session is created."""

    cwd: str | None = None
    validators: tuple[tuple[str, ...], ...] = ()
    limits: Limits = field(default_factory=Limits)
    pass_env: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    # None only for a Session created before Cells had a network (its event has none, and
    # one made again from it must be the same): it has OLD_NETWORK.
    network: Network | None = field(default_factory=Network)

    def created(self, session_id: str, goal: str) -> SessionCreated:
        """The data of the ``session_created`` event that fixes these settings."""
        data: SessionCreated = {
            "session_id": session_id,
            "goal": goal,
            "cwd": str(Path(self.cwd or os.getcwd()).resolve()),
            "validators": [list(argv) for argv in self.validators],
            "limits": self.limits.to_dict(),
            "pass_env": sorted(set(self.pass_env)),
            "secrets": sorted(set(self.secrets)),
        }
        if self.network is not None:
            data["network"] = self.network.to_dict()
        return data

    @classmethod
    def stored(cls, data: Mapping[str, Any]) -> Settings:
        """The settings a ``session_created`` event's data fixed (older events included), or
        the projection's ``session``, which keeps them."""
        return cls(
            cwd=str(data["cwd"]),
            validators=tuple(tuple(argv) for argv in data["validators"]),
            limits=Limits.from_dict(data["limits"]),
            pass_env=tuple(data.get("pass_env", ())),
            secrets=tuple(data.get("secrets") or ()),
            network=None if data.get("network") is None else Network.stored(data["network"]),
        )
