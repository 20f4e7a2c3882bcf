"""The system prompt (``rio_ci/model/prompt.md``) against the real APIs it teaches: every tool
it names exists with the parameters it shows (function and command), every import it shows
works, its worked patch is admitted by a real Session shaped as the prompt describes and its
code Cell really edits the file, and its way of reading a masked output works in a real Cell.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import accept

import rio_ci.api
import rio_ci.tools
from rio_ci.model.turn import system_prompt
from rio_ci.session.session import Receipt, Session
from rio_ci.tools.__main__ import attach_values, build_parser
from tests.kit import ROOT, cmd_cell, events, note_cell, run_cli
from tests.round_loop_kit import kinds
from tests.run_cli import new_session, status, write_script

PROMPT = system_prompt()
ROW = re.compile(r"^\| [^|]+ \| `python -m rio_ci\.tools ([^`]+)`[^|]* \| `([^`]+)` \|$", re.M)
ROWS = ROW.findall(PROMPT)
# Placeholders of the table's command column, and a value each can take.
VALUES = {
    "FILE": "app.py",
    "TEXT": "x",
    "N": "3",
    "PATTERN": "*.py",
    "[PATH]": "src",
    "PATCHFILE": "fix.diff",
}


def test_the_tool_table_lists_every_tool() -> None:
    functions = {call.split("(")[0] for _, call in ROWS}
    assert functions == set(rio_ci.tools.__all__) - {"ToolError"}


@pytest.mark.parametrize(("command", "call"), ROWS, ids=[c.split()[0] for c, _ in ROWS])
def test_each_tool_takes_the_arguments_the_prompt_shows(command: str, call: str) -> None:
    node = ast.parse(call.replace("...", "None"), mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    function: Callable[..., Any] = getattr(rio_ci.tools, node.func.id)
    inspect.signature(function).bind(
        *node.args, **{k.arg: None for k in node.keywords if k.arg is not None}
    )
    argv = [VALUES.get(word, word) for word in shlex.split(command)]
    args = build_parser().parse_args(attach_values(argv))
    assert args.command == node.func.id.replace("_", "-")


def test_every_import_the_prompt_shows_exists() -> None:
    modules = {"rio_ci.tools": rio_ci.tools, "rio_ci.api": rio_ci.api}
    imports = re.findall(r"from (rio_ci\.\w+) import ([\w, ]+)", PROMPT)
    assert {module for module, _ in imports} == set(modules)
    for module, names in imports:
        for name in names.split(","):
            assert hasattr(modules[module], name.strip()), f"{module}.{name.strip()}"
    signature = inspect.signature(rio_ci.api.output)
    assert '`rio_ci.api.output(cell_id, stream="stdout")`' in PROMPT
    assert list(signature.parameters) == ["cell_id", "stream"]
    assert signature.parameters["stream"].default == "stdout"


def worked_patch() -> list[dict[str, Any]]:
    block = PROMPT.split("## A worked patch", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    ops: list[dict[str, Any]] = json.loads(block)["patch"]
    return ops


def test_the_worked_patch_is_admitted_by_a_session_shaped_as_described(
    make_session: Callable[..., Session],
) -> None:
    """ "revision 7, next_cell_id 5: /cells/0 the plan note (id 2), /cells/1 a listing
    (id 3), /cells/2 a test run (id 4)"."""
    session = make_session()
    accept(session, lambda p: p.add(note_cell("scratch")))  # id 1
    accept(
        session,
        lambda p: p.add(note_cell("Plan: reproduce")).add(cmd_cell("ls")).add(cmd_cell("pytest")),
    )
    accept(session, lambda p: p.remove(0))
    for _ in range(4):
        accept(session, lambda p: p)  # rounds that change nothing but the revision
    turn = session.prepare_turn()
    state = turn["state"]
    assert (state["revision"], state["runtime"]["next_cell_id"]) == (7, 5)
    assert [c["id"] for c in state["cells"]] == [2, 3, 4]
    receipt = session.step(turn["turn_id"], worked_patch())
    assert isinstance(receipt, Receipt), receipt
    assert receipt.cell_ids == [5, 6, 7]


def test_the_worked_code_cell_edits_the_file_and_prints_the_region(tmp_path: Path) -> None:
    (code_cell,) = [
        op["value"]
        for op in worked_patch()
        if isinstance(op.get("value"), dict) and op["value"]["kind"] == "code"
    ]
    (tmp_path / "app").mkdir()
    routes = tmp_path / "app" / "routes.py"
    routes.write_text('def profile(session):\n    user = session["user"]\n    return user\n')
    script = tmp_path / "cell.py"
    script.write_text(code_cell["source"])
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert 'user = session.get("user")' in routes.read_text()
    assert "replaced line 2 of app/routes.py" in done.stdout  # printed, so the model sees it


def test_reading_a_full_output_as_the_prompt_shows_works_in_a_cell(tmp_path: Path) -> None:
    (shown,) = re.findall(r'`(\["python", "-c", "from rio_ci\.api import output;[^`]+)`', PROMPT)
    argv = json.loads(shown)
    argv[0] = sys.executable  # "python" as the Cell's PATH has it (not every test host does)
    argv[2] = argv[2].replace("output(12)", "output(1)")
    db = new_session(tmp_path)
    script = write_script(
        tmp_path,
        [
            [
                {
                    "op": "add",
                    "path": "/cells/-",
                    "value": {
                        "kind": "cmd",
                        "argv": [sys.executable, "-c", "print('needle ' * 3000)"],
                    },
                }
            ],
            [{"op": "add", "path": "/cells/-", "value": {"kind": "cmd", "argv": argv}}],
            [
                {
                    "op": "add",
                    "path": "/cells/-",
                    "value": {
                        "kind": "note",
                        "role": "conclusion",
                        "result": "success",
                        "text": "read",
                    },
                }
            ],
        ],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    evs = events(db)
    read = "".join(
        e.get("text", "") + e.get("tail", "") for e in kinds(evs, "output") if e["cell_id"] == 2
    )
    full = json.loads(run_cli("output", str(db), "1").stdout)["text"]
    assert "bytes elided" in full  # only part of it is in the State
    assert read == full[-6000:] + "\n"
