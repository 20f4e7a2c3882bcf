"""What a round costs at the provider: a scripted 50-round Session through the real Anthropic
adapter (``AnthropicModel``, the real SDK) against the loopback provider, which bills prompt
caching as the API does (``caching.py``).

The Session is a coding job in small: a repository of three files; rounds that read files
(``rio_ci.tools view``, ``grep``), edit them (``rio_ci.tools replace``) and run the tests
(a script printing a pytest-like report); in round 20 the plan note at the head of the list
is replaced, in round 35 an earlier test run's Cell (and its output) is removed; round 50
concludes. Everything goes through the ``RoundLoop``: Turns, admission, real Executions
through an Owner, usage committed from each reply.

Figures: ``cache_read_share`` (input tokens read from the cache / all input tokens) and
``cost_ratio_vs_uncached`` (the Session's input cost / the same tokens at the base input
price), both from the usage the Session committed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rio_ci.commands.bench.provider import LoopbackProvider
from rio_ci.core.limits import Limits
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.turn import VOLATILE_HEADER
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

__all__ = ["ROUNDS", "SessionScript", "measure_tokens"]

ROUNDS = 50
MODEL = "claude-sonnet-5-5"
REPLACED_ROUND = 20
REMOVED_ROUND = 35
ROUTES = "".join(
    f"def route_{i}(request):\n"
    f"    '''Handle /path/{i}: read the session, check the user, answer.'''\n"
    f"    user = request.session['user']\n"
    f"    return {{'status': 200, 'route': {i}, 'user': user}}\n\n"
    for i in range(24)
)
MODELS = "".join(
    f"class Model{i}:\n    fields = ('id', 'name', 'owner', 'created')\n\n"
    f"    def describe(self):\n        return f'model {i}: {{self.fields}}'\n\n"
    for i in range(16)
)
RUN_TESTS = (
    "import sys\n"
    "names = [f'tests/test_routes.py::test_route_{i:02d}' for i in range(28)]\n"
    "src = open('app/routes.py').read()\n"
    "failing = src.count(\"request.session['user']\")\n"
    "for n, name in enumerate(names):\n"
    "    ok = n >= failing\n"
    "    print(f\"{name} {'PASSED' if ok else 'FAILED'}{' ' * 8}[{100 * (n + 1) // 28:3d}%]\")\n"
    "if failing:\n"
    "    print(\"E   KeyError: 'user'\\napp/routes.py:3: in route_0\")\n"
    "print(f'{28 - min(failing, 28)} passed, {min(failing, 28)} failed')\n"
    "sys.exit(1 if failing else 0)\n"
)


class SessionScript:
    """The model's side: the patch for each request, from the revision and next Cell id the
    request shows (its volatile part) and the Cell order the script has built."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.order: list[int] = []  # Cell ids by position, as the patches made them
        self.tests: list[int] = []  # ids of the test-run Cells
        self.requests = 0

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.requests += 1
        seen = volatile_part(body)
        n, next_id = self.requests, seen["runtime"]["next_cell_id"]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/revision", "value": seen["revision"]}]
        if n == 1:
            return [*ops, *self._add(next_id, _note("Plan: read, reproduce, fix, test."))]
        if n >= ROUNDS:
            conclusion = {"kind": "note", "role": "conclusion", "result": "success"}
            return [*ops, *self._add(next_id, {**conclusion, "text": "Fixed all routes."})]
        if n == REPLACED_ROUND:
            old = self.order[0]
            value = {**_note(f"Plan, revised in round {n}: fix route by route."), "id": next_id}
            self.order[0] = next_id
            return [
                *ops,
                {"op": "replace", "path": "/cells/0", "value": {**value, "previous_id": old}},
            ]
        if n == REMOVED_ROUND:  # an early test run and its output leave the context
            gone = self.tests[1]
            ops.append({"op": "remove", "path": f"/cells/{self.order.index(gone)}"})
            self.order.remove(gone)
            return ops
        return [*ops, *self._add(next_id, self._work(n))]

    def _add(self, cell_id: int, cell: dict[str, Any]) -> list[dict[str, Any]]:
        self.order.append(cell_id)
        if cell.get("argv", [])[-1:] == ["run_tests.py"]:  # a test run
            self.tests.append(cell_id)
        value = {**cell, "id": cell_id, "previous_id": None}
        return [{"op": "add", "path": "/cells/-", "value": value}]

    def _work(self, n: int) -> dict[str, Any]:
        tools = [self.python, "-m", "rio_ci.tools"]
        route = n // 4
        kind = n % 4
        if kind == 0:
            start = 1 + (route * 5) % 100
            return _cmd(
                [*tools, "view", "app/routes.py", "--start", str(start), "--end", str(start + 14)]
            )
        if kind == 1:
            tail = f"\n    return {{'status': 200, 'route': {route},"
            old, new = (
                f"    user = request.session['user']{tail}",
                f"    user = request.session.get('user'){tail}",
            )
            return _cmd([*tools, "replace", "--old", old, "--new", new, "app/routes.py"])
        if kind == 2:
            return _cmd([self.python, "run_tests.py"])
        return _cmd([*tools, "grep", f"Model{route % 16}", "app"])


def _note(text: str) -> dict[str, Any]:
    return {"kind": "note", "text": text}


def _cmd(argv: list[str]) -> dict[str, Any]:
    return {"kind": "cmd", "argv": argv}


def volatile_part(body: dict[str, Any]) -> dict[str, Any]:
    """The volatile part of the State a request shows (revision, runtime)."""
    for block in body["messages"][-1]["content"]:
        head, _, rest = block.get("text", "").partition("\n")
        if head == VOLATILE_HEADER:
            seen: dict[str, Any] = json.loads(rest)
            return seen
    raise RuntimeError("bench: a request without the State's volatile part")


def play(root: Path) -> dict[str, Any]:
    """Run the scripted Session in ``root``; its committed usage and the provider's bills."""
    (work := root / "work").mkdir(parents=True)
    (work / "app").mkdir()
    (work / "app" / "routes.py").write_text(ROUTES)
    (work / "app" / "models.py").write_text(MODELS)
    (work / "run_tests.py").write_text(RUN_TESTS)
    db = root / "tokens.sqlite3"
    limits = Limits(rounds=ROUNDS + 10, tokens=100_000_000, cost_usd=1000.0)
    Session.create(
        db, "bench: fix the KeyError in every route", Settings(cwd=str(work), limits=limits)
    ).close()
    script = SessionScript(sys.executable)
    with LoopbackProvider(script) as provider:
        model = AnthropicModel(MODEL, api_key="bench-key", base_url=provider.base_url)
        owner = Owner(str(db))
        try:
            outcome = RoundLoop(owner, model).run()
            usage = dict(owner.session.proj.usage)
        finally:
            owner.close()
    if outcome.status != "succeeded" or script.requests != ROUNDS:
        raise RuntimeError(
            f"bench: the scripted Session ended {outcome.status} ({outcome.reason}) after "
            f"{script.requests} requests"
        )
    price = model.price()
    assert price is not None
    return {"usage": usage, "price": price, "billed": provider.billed}


def measure_tokens(root: Path, quick: bool) -> dict[str, Any]:
    """``cache_read_share`` and ``cost_ratio_vs_uncached`` of the scripted Session (the same
    Session with ``--quick``: it is deterministic)."""
    played = play(root / "tokens")
    usage, price = played["usage"], played["price"]
    total = usage["input_tokens"]  # fresh + cache writes + cache reads
    read, written = usage["cache_read_tokens"], usage["cache_write_tokens"]
    fresh = total - read - written
    cost = fresh * price.input + written * price.cache_write + read * price.cache_read
    return {
        "cache_read_share": round(read / total, 4),
        "cost_ratio_vs_uncached": round(cost / (total * price.input), 4),
        "session_input_tokens": total,
        "session_cache_read_tokens": read,
        "session_cache_write_tokens": written,
        "session_rounds": usage["rounds"],
    }
