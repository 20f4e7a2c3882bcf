"""A model provider that exists only for tests: one module and one row (``ROW``), added to the
providers table at test time with ``rio_ci.model.providers.register``, touching nothing else of
rio_ci. It shows what adding a provider takes (docs/models.md, "Adding a provider").

Its model reads the Turn as every provider does (``rio_ci.model.turn.read_turn``) and answers
from the State alone, without a network: the first Turn adds a ``cmd`` Cell that prints the
model's name; once that Cell has finished, it concludes with success. Usage is counted from
the text it read (a token per four characters), at its own price.
"""

from __future__ import annotations

import os
from typing import Any

from rio_ci.core.errors import ModelError
from rio_ci.model.base import ModelReply, ModelRequest, Price, Usage
from rio_ci.model.pictures import RequestLimits
from rio_ci.model.providers import Provider
from rio_ci.model.turn import read_turn, system_prompt

KEY = "TINY_API_KEY"
ROW = Provider(
    name="tiny",
    prefixes=("tiny",),
    module=__name__,
    credentials=(KEY,),
    sdk=None,
    models="tests/fakes/tiny_provider.py",
    efforts=("high",),
    cache_write_factor=1.0,
)
PRICE = Price(input=1.0, output=2.0, cache_write=1.0, cache_read=0.5)


class TinyModel:
    def __init__(self, model: str, price: Price | None) -> None:
        self.name = f"tiny:{model}"
        self._price = price or PRICE

    def price(self) -> Price | None:
        return self._price

    def cost(self, usage: Usage) -> float | None:
        return self._price.cost(usage)

    def ask(self, request: ModelRequest) -> ModelReply:
        reading = read_turn(request)
        read = [system_prompt(), *reading.stable, *reading.changing, reading.turn]
        usage = Usage(sum(len(p) for p in read if isinstance(p, str)) // 4, 20)
        usage = Usage(usage.input_tokens, usage.output_tokens, cost_usd=self.cost(usage))
        patch = self._decide(request.state)
        raw: dict[str, Any] = {"model": self.name, "tool_input": {"patch": patch}}
        return ModelReply(patch=patch, usage=usage, raw=raw, rationale="tiny decides")

    def _decide(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        runtime = state["runtime"]
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/revision", "value": state["revision"]}
        ]
        if not state["cells"]:
            cell = {"kind": "cmd", "argv": ["echo", self.name]}
        else:  # the harness asks again once the Cell's result is in
            facts = runtime["cells"].get(str(state["cells"][0]["id"]), {})
            said = facts.get("stdout") == f"{self.name}\n"
            result = "success" if said else "failure"
            cell = {"kind": "note", "role": "conclusion", "result": result, "text": str(facts)}
        new = {"id": runtime["next_cell_id"], "previous_id": None, **cell}
        return [*ops, {"op": "add", "path": "/cells/-", "value": new}]


def build(prefix: str, model: str, *, effort: str, price: Price | None, connect: bool) -> TinyModel:
    if connect and not os.environ.get(KEY):
        raise ModelError(f"no tiny key: set {KEY}", transient=False)
    return TinyModel(model, price)


def default_model() -> str:
    return "tiny-1"


def picture_limits() -> RequestLimits:
    return RequestLimits(1024, 1, 1, 1 << 20)


def known_models() -> list[str]:
    return ["tiny-1"]
