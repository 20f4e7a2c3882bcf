"""The scripted model: a YAML list of patches, one per round (docs/cli.md).

Round *k* answers the Session's *k*-th Turn, counted from accepted patches, so a script
carries on correctly across restarts and jobs. The script fills in what its author cannot
know: the leading ``/revision`` test, each new Cell's ``id`` and ``previous_id``, and two
placeholders — ``target_cell_id: $unresolved`` and ``evidence_refs: [$delivered]``.

One extension lets the same script work whether or not a run was interrupted (the oracles of
``rio-ci eval``, which must solve their case with and without ``--crash``): an operation may
carry ``when: unresolved`` (kept only when the Turn's State shows an unresolved
UnknownExecution) or ``when: settled`` (kept only when it shows none). The key is removed
before the patch is submitted, and filtering happens before ids are filled in, so a dropped
operation takes no id.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Any

import yaml

from rio_ci.core.errors import ModelError, UsageError
from rio_ci.model.base import ModelReply, ModelRequest, Price, Usage

_INDEX = re.compile(r"^/cells/(0|[1-9][0-9]*)\Z")
WHEN = ("unresolved", "settled")
WAIT_SECONDS = 120.0  # the longest a round waits for its wait_for file


def load_waits(path: str | Path) -> list[str | None]:
    """Per round, the file its answer waits for (``{patch: [...], wait_for: FILE}``), or
    None: a slow model for tests, which wait on a file they create, never on the clock."""
    data = yaml.safe_load(Path(path).read_text())
    waits: list[str | None] = []
    for item in data:
        wait = item.get("wait_for") if isinstance(item, dict) else None
        if wait is not None and not isinstance(wait, str):
            raise UsageError(f"script {path}: wait_for must be a file name, got {wait!r}")
        waits.append(wait)
    return waits


def load_script(path: str | Path) -> list[list[dict[str, Any]]]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"cannot read script {path}: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(f"script {path} is not valid YAML: {exc}") from None
    if not isinstance(data, list):
        raise UsageError(f"script {path} must be a YAML list of rounds")
    rounds = []
    for number, item in enumerate(data, 1):
        patch = item.get("patch") if isinstance(item, dict) else item
        if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
            raise UsageError(
                f"script {path}: round {number} must be a list of operations or {{patch: [...]}}"
            )
        for op in patch:
            if "when" in op and op["when"] not in WHEN:
                raise UsageError(
                    f"script {path}: round {number}: when must be "
                    f"{' or '.join(WHEN)}, got {op['when']!r}"
                )
        rounds.append(patch)
    return rounds


class ScriptedModel:
    def __init__(self, path: str | Path):
        self.path = str(path)
        self.name = f"scripted:{path}"
        self.rounds = load_script(path)
        self.waits = load_waits(path)

    def price(self) -> Price | None:
        return Price(0.0, 0.0, 0.0, 0.0)  # a script costs nothing

    def cost(self, usage: Usage) -> float | None:
        return 0.0

    def ask(self, request: ModelRequest) -> ModelReply:
        k = request.round_index
        if k > len(self.rounds):
            raise ModelError(
                f"the script has {len(self.rounds)} rounds; round {k} is past its end",
                transient=False,
            )
        wait = self.waits[k - 1]
        deadline = time.monotonic() + WAIT_SECONDS
        while wait is not None and not Path(wait).exists():
            if time.monotonic() > deadline:
                raise ModelError(
                    f"round {k} waited {WAIT_SECONDS:.0f} s for {wait}", transient=False
                )
            time.sleep(0.02)
        patch = complete(self.rounds[k - 1], request)
        return ModelReply(
            patch=patch,
            usage=Usage(cost_usd=0.0),
            raw={"script": self.path, "round": k, "patch": patch},
        )


def complete(ops: list[dict[str, Any]], request: ModelRequest) -> list[dict[str, Any]]:
    """Fill in the revision test, ids, predecessors and placeholders for one round."""
    state = request.state
    ops = _applicable(copy.deepcopy(ops), state)
    if not (ops and ops[0].get("op") == "test" and ops[0].get("path") == "/revision"):
        ops.insert(0, {"op": "test", "path": "/revision", "value": state["revision"]})
    work = [c["id"] for c in state["cells"]]
    next_id = state["runtime"]["next_cell_id"]
    for op in ops[1:]:
        kind, path = op.get("op"), op.get("path", "")
        match = _INDEX.match(path) if isinstance(path, str) else None
        if kind == "remove" and match and int(match.group(1)) < len(work):
            del work[int(match.group(1))]
            continue
        if kind not in ("add", "replace") or not isinstance(op.get("value"), dict):
            continue
        cell = op["value"]
        cell.setdefault("id", next_id)
        if kind == "add":
            cell.setdefault("previous_id", None)
            work.append(cell["id"])
        elif match and int(match.group(1)) < len(work):
            cell.setdefault("previous_id", work[int(match.group(1))])
            work[int(match.group(1))] = cell["id"]
        next_id += 1
        _placeholders(cell, request)
    return ops


def unresolved_cells(state: dict[str, Any]) -> list[int]:
    """Ids of the Cells whose UnknownExecution is unresolved in ``state``, oldest first."""
    return sorted(
        int(k)
        for k, v in state["runtime"]["cells"].items()
        if (v.get("result") or {}).get("type") == "UnknownExecution"
        and v.get("resolved_by") is None
    )


def _applicable(ops: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
    """The operations whose ``when`` matches the Turn's State, without the ``when`` key."""
    uncertain = "unresolved" if unresolved_cells(state) else "settled"
    kept = []
    for op in ops:
        when = op.pop("when", None)
        if when is None or when == uncertain:
            kept.append(op)
    return kept


def _placeholders(cell: dict[str, Any], request: ModelRequest) -> None:
    runtime = request.state["runtime"]
    if cell.get("target_cell_id") == "$unresolved":
        unresolved = unresolved_cells(request.state)
        cell["target_cell_id"] = unresolved[0] if unresolved else None
    refs = cell.get("evidence_refs")
    if isinstance(refs, list) and "$delivered" in refs:
        own = f"execution:{cell.get('target_cell_id')}"
        delivered = [f"session:event:{m['seq']}" for m in runtime["inbox"] if m["id"] != own]
        cell["evidence_refs"] = [r for r in refs if r != "$delivered"] + delivered
