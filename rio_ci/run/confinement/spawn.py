"""How a Worker is started: the one place a confinement reaches ``subprocess.Popen``.

A ``Spawn`` is what the Owner's ``Confinement`` tells ``rio_ci.run.worker`` about starting a
process, and the Worker applies it without knowing why: ``prefix`` runs first and must
``exec`` the gate it is given (so the gate keeps its pid, the Worker's identity: a wrapper
that enters a namespace, say), ``options`` are ``Popen``'s own (the user, the group,
``preexec_fn``), ``around`` wraps the ``Popen`` call itself (the thread that forks enters the
Cells' network namespace for it, so the child starts there), and ``uid`` names the user every
process of which is the Worker's, stopped with it (None: the harness's own, where only the
Worker's group and token are).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Spawn"]


@dataclass(frozen=True)
class Spawn:
    prefix: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    uid: int | None = None
    around: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
