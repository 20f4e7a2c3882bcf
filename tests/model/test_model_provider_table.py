"""The providers table (rio_ci/model/providers.py): a provider is one module and one row.

A provider that lives only in the tests (tests/fakes/tiny_provider.py) is added to the table
with ``register`` and runs a Session's rounds through the real harness and Owner; every place
that names providers (the SDK preload, the harness's own credentials, ``--model``'s forms)
sees it from the table alone. The Claude row is held to what its module and docs say."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from rio_ci.commands.run import run_command
from rio_ci.core.credentials import SECRET_NAME
from rio_ci.core.errors import UsageError
from rio_ci.github.contract import Config, harness_secrets
from rio_ci.model import providers
from rio_ci.model.claude import table
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.start import preload
from rio_ci.start.invocation import Invocation
from tests.fakes import tiny_provider
from tests.kit import events

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Iterator[providers.Provider]:
    """The tiny provider in the table for one test, its key set."""
    monkeypatch.setenv(tiny_provider.KEY, "tiny-key-5c1d")
    providers.register(tiny_provider.ROW)
    try:
        yield tiny_provider.ROW
    finally:
        providers.unregister(tiny_provider.ROW.name)


def test_a_provider_added_as_a_module_and_a_row_runs_a_session(
    tiny: providers.Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rio-ci run --model tiny`` (in process): the table builds the tiny model, which
    reads its Turns as every provider does; its Cell runs under the Owner and it concludes
    from the Cell's output, its usage counted at its own price."""
    monkeypatch.setattr("sys.stderr", io.StringIO())  # the live log
    db = tmp_path / "s.sqlite3"
    Session.create(db, "say your name", Settings(cwd=str(tmp_path))).close()
    printed: list[dict[str, Any]] = []
    code = run_command(
        str(db),
        "tiny",
        deadline=None,
        price=None,
        effort="high",
        confinement=ConfinementSettings(),
        emit=printed.append,
    )
    assert code == 0 and printed[-1]["status"] == "succeeded", printed
    recorded = events(db)
    attempts = [e["model"] for e in recorded if e["kind"] == "model_attempt"]
    assert attempts == ["tiny:tiny-1", "tiny:tiny-1"]
    (result,) = [e["result"] for e in recorded if e["kind"] == "execution_finished"]
    assert result["type"] == "success"  # the Cell printed the model's name: it concluded
    (usage, _) = [e["usage"] for e in recorded if e["kind"] == "model_response"]
    assert usage["input_tokens"] > 0
    price = tiny_provider.PRICE
    cost = usage["input_tokens"] * price.input + usage["output_tokens"] * price.output
    assert usage["cost_usd"] == pytest.approx(cost / 1e6)


def test_everyone_that_names_providers_reads_the_table(
    tiny: providers.Provider, tmp_path: Path
) -> None:
    assert "tiny[:MODEL]" in providers.spec_forms()
    assert providers.build_model("tiny:tiny-2").name == "tiny:tiny-2"
    # no SDK to import early for it; Claude's rows still import theirs
    wanted = preload.sdk_wanted
    assert wanted(Invocation.read(["run", "s.db", "--model", "tiny"]), {}) is None
    assert wanted(Invocation.read(["action"]), {"RIO_MODEL": "tiny:x"}) is None
    assert wanted(Invocation.read(["run", "s.db"]), {}) == "anthropic"
    # its key is the harness's own: a Session may not hand it to its Cells
    assert tiny_provider.KEY in harness_secrets()
    with pytest.raises(UsageError, match=f"may not name {tiny_provider.KEY}"):
        (tmp_path / "rio.yml").write_text(f"pass_env: [{tiny_provider.KEY}]\n")
        Config.load(tmp_path, "rio.yml")
    # a flat --price counts cache writes at its own premium
    assert providers.parse_price("4/20", "tiny:x").cache_write == 4.0
    assert providers.parse_price("4/20", "bedrock:x").cache_write == 5.0
    # a bare fallback model id goes to the main model's provider
    assert providers.fallback_spec("tiny:a", "b") == "tiny:b"


def test_without_its_row_the_provider_is_unknown() -> None:
    with pytest.raises(UsageError, match=r"--model must be anthropic\[:MODEL\], bedrock"):
        providers.build_model("tiny")
    assert tiny_provider.KEY not in harness_secrets()


def test_a_row_that_clashes_or_would_leak_its_key_is_refused(tiny: providers.Provider) -> None:
    with pytest.raises(ValueError, match="taken"):
        providers.register(tiny._replace(name="other"))
    with pytest.raises(ValueError, match="taken"):
        providers.register(tiny._replace(name="other", prefixes=("scripted",)))
    leaky = tiny._replace(name="leaky", prefixes=("leaky",), credentials=("LEAKY_URL",))
    with pytest.raises(ValueError, match="LEAKY_URL would reach Cells"):
        providers.register(leaky)
    assert [row.name for row in providers.PROVIDERS] == ["claude", "tiny"]


def test_the_claude_row_says_what_its_module_does() -> None:
    (row,) = [r for r in providers.PROVIDERS if r.name == "claude"]
    assert row.efforts == table.EFFORTS
    data = resources.files("rio_ci.model.claude").joinpath("models.json")
    assert (ROOT / row.models).read_text() == data.read_text()
    assert row.load().default_model() == table.default_model() in table.table()["models"]
    assert all(SECRET_NAME.search(name) for name in row.credentials)
    assert providers.DEFAULT_SPEC == "anthropic" and providers.sdk_of(None) == row.sdk


def test_docs_models_lists_every_row() -> None:
    """docs/models.md's table of providers names each row's prefixes, module, key
    variables, SDK and model file."""
    text = (ROOT / "docs" / "models.md").read_text()
    section = text.split("## Providers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    for provider in providers.PROVIDERS:
        (line,) = [r for r in rows if r.startswith(f"| `{provider.name}` |")]
        named = set(re.findall(r"`([^`]+)`", line))
        wanted = {*provider.prefixes, provider.module, *provider.credentials, provider.models}
        assert wanted | ({provider.sdk} if provider.sdk else set()) <= named, line
