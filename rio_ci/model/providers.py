"""The providers table, and ``--model`` specs → a ``Model`` (docs/models.md, "Providers").

    anthropic | anthropic:MODEL     the Claude API (default model: the table's default)
    bedrock:MODEL | vertex:MODEL    the same models through Amazon Bedrock / Google Vertex
    scripted:FILE                   a YAML list of patches, one per round (offline)

A provider is one module and one row of ``PROVIDERS``: the spec prefixes it answers, the
module that builds its models (``build``, ``default_model``, ``picture_limits``: see
``ProviderModule``), the environment variables that hold its key, the SDK a run starts
importing early, where its model ids and prices are, its effort levels, and what a flat
``--price`` counts a cache write at. Everyone that names a provider reads this table: the
command line's help, the SDK preload (rio_ci/sdk_preload.py), the harness's own credentials
that a Cell never gets (rio_ci/github/env.py), the action's inputs (a test holds action.yml
to it) and docs/models.md (a test holds it to the table too). ``register`` adds a row at run
time: for a provider that lives outside the package (a test's, say).

``scripted:FILE`` is no provider: the scripted model is the offline one every test uses.

For Claude, MODEL is a Claude API id (``claude-sonnet-5-5``), an alias from the model table,
or the platform's own id (a Bedrock inference profile such as
``global.anthropic.claude-opus-5-5``), which is sent as given.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.core.errors import UsageError

if TYPE_CHECKING:
    from rio_ci.model.base import Model, Price
    from rio_ci.model.pictures import RequestLimits

__all__ = [
    "DEFAULT_EFFORT",
    "DEFAULT_SPEC",
    "PROVIDERS",
    "Provider",
    "ProviderModule",
    "build_model",
    "credentials",
    "efforts",
    "fallback_spec",
    "full_spec",
    "nearest_models",
    "parse_price",
    "picture_limits",
    "priced_model",
    "priced_models",
    "provider_of",
    "register",
    "sdk_of",
    "spec_forms",
    "unregister",
]

SCRIPTED = "scripted"
# The level rio_ci asks for unless ``--effort`` (the action's ``effort``) names another, with
# every model that takes one (docs/models.md, "Choosing a model and effort"): rio_ci's one
# default effort. Not a model's own default (what its API does when no level is sent, which
# rio_ci never lets happen).
DEFAULT_EFFORT = "high"
_PRICE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)/([0-9]+(?:\.[0-9]+)?)\Z")


class ProviderModule(Protocol):
    """What a row's module offers (rio_ci/model/claude/__init__.py is one)."""

    def build(
        self, prefix: str, model: str, *, effort: str, price: Price | None, connect: bool
    ) -> Model:
        """The model ``model`` (never empty) of the spec ``prefix:model``. ``connect=False``:
        its name and price only (no client, no credential read)."""
        ...

    def default_model(self) -> str:
        """The model of a spec that names none (``anthropic``, ``anthropic:``)."""
        ...

    def picture_limits(self) -> RequestLimits:
        """What one request may carry of pictures (rio_ci/model/pictures.py)."""
        ...

    def known_models(self) -> list[str]:
        """Every model id (and alias) its table lists."""
        ...


class Provider(NamedTuple):
    """One row of the providers table. (A named tuple, not a dataclass: the SDK preload
    reads the table before anything else is imported, and ``dataclasses`` costs more to
    import than the rest of the table.)"""

    name: str
    prefixes: tuple[str, ...]  # the --model spec prefixes it answers; the first is its own
    module: str  # the module that builds its models (a ProviderModule)
    credentials: tuple[str, ...]  # the variables that may hold its key: the harness's own
    sdk: str | None  # the module a run starts importing at once (rio_ci/sdk_preload.py)
    models: str  # where its model ids, prices and limits are (a file of the repository)
    efforts: tuple[str, ...]  # the --effort levels its models may take
    # A flat --price IN/OUT counts a cache write at IN times this (its cache-write premium).
    cache_write_factor: float
    action_input: str | None = None  # the action input that carries its key, if any

    def load(self) -> ProviderModule:
        return cast(ProviderModule, importlib.import_module(self.module))


PROVIDERS: list[Provider] = [
    Provider(
        name="claude",
        prefixes=("anthropic", "bedrock", "vertex"),
        module="rio_ci.model.claude",
        # The Claude API's key, and Bedrock's API key (either name the SDK reads). Vertex
        # uses Google's application default credentials, whose file the Owner's
        # credential rule already keeps from Cells.
        credentials=("ANTHROPIC_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "ANTHROPIC_AWS_API_KEY"),
        sdk="anthropic",
        models="rio_ci/model/claude/models.json",
        efforts=("low", "medium", "high", "xhigh", "max"),
        # A 5-minute cache write costs 1.25 times the base input price on every Claude
        # model (the provider's pricing page; every entry of models.json agrees).
        cache_write_factor=1.25,
        action_input="anthropic-api-key",
    ),
]
# The spec a run without ``--model`` (the action without ``model``) uses: the first
# provider's default model. rio_ci's one default model.
DEFAULT_SPEC = PROVIDERS[0].prefixes[0]


def register(row: Provider) -> None:
    """Add ``row`` to the table (a provider outside the package: a plugin's, a test's).
    ValueError for a row whose name or prefixes are taken, or whose credentials the
    harness would not keep from Cells (docs/security.md: credentials are found by name)."""
    taken = {SCRIPTED, *(p for r in PROVIDERS for p in r.prefixes)}
    if row.name in {r.name for r in PROVIDERS} or taken & set(row.prefixes) or not row.prefixes:
        raise ValueError(f"provider {row.name}: its name or a prefix of {row.prefixes} is taken")
    unseen = [name for name in row.credentials if not SECRET_NAME.search(name)]
    if unseen:
        raise ValueError(
            f"provider {row.name}: {', '.join(unseen)} would reach Cells: a credential's "
            "name must say so (TOKEN, SECRET, API_KEY, CREDENTIAL ...)"
        )
    PROVIDERS.append(row)


def unregister(name: str) -> None:
    """Remove the row ``register`` added as ``name``."""
    PROVIDERS[:] = [row for row in PROVIDERS if row.name != name]


def provider_of(prefix: str) -> Provider | None:
    """The row that answers specs beginning ``prefix:``, or None."""
    return next((row for row in PROVIDERS if prefix in row.prefixes), None)


def sdk_of(spec: str | None) -> str | None:
    """The SDK a run of ``spec`` imports (None: a script, or no provider answers it)."""
    row = provider_of((spec or DEFAULT_SPEC).partition(":")[0])
    return row.sdk if row is not None else None


def credentials() -> frozenset[str]:
    """Every variable that may hold a provider's key: the harness's own, never a Cell's."""
    return frozenset(name for row in PROVIDERS for name in row.credentials)


def efforts() -> tuple[str, ...]:
    """Every ``--effort`` level a provider's models may take, in the table's order."""
    return tuple(dict.fromkeys(level for row in PROVIDERS for level in row.efforts))


def spec_forms() -> str:
    """The specs ``--model`` takes, for help and errors: ``anthropic[:MODEL], bedrock:MODEL,
    vertex:MODEL or scripted:FILE``."""
    forms = [
        f"{prefix}[:MODEL]" if number == 0 else f"{prefix}:MODEL"
        for row in PROVIDERS
        for number, prefix in enumerate(row.prefixes)
    ]
    return ", ".join(forms) + f" or {SCRIPTED}:FILE"


def picture_limits(spec: str | None = None) -> RequestLimits:
    """What one request of ``spec``'s provider may carry of pictures (the default
    provider's for a script)."""
    row = provider_of((spec or DEFAULT_SPEC).partition(":")[0]) or PROVIDERS[0]
    return row.load().picture_limits()


def build_model(
    spec: str | None = None,
    *,
    effort: str = DEFAULT_EFFORT,
    price: Price | None = None,
    connect: bool = True,
) -> Model:
    """The ``Model`` that ``spec`` names; ``UsageError`` for a spec that names none.

    ``effort`` and ``price`` (``--effort``, ``--price``) apply to a provider's models; a
    script costs nothing and ignores them. ``connect=False``: a provider's model without
    its client (its name and price only).
    """
    kind, _, rest = full_spec(spec or DEFAULT_SPEC).partition(":")
    if kind == SCRIPTED:
        if not rest:
            raise UsageError("--model scripted:FILE needs a file")
        from rio_ci.model.scripted import ScriptedModel

        return ScriptedModel(rest)
    row = provider_of(kind)
    if row is None:
        raise UsageError(f"--model must be {spec_forms()}; got {spec!r}")
    module = row.load()
    return module.build(
        kind, rest or module.default_model(), effort=effort, price=price, connect=connect
    )


# A bare model id of a provider, taken as that provider's own (its first prefix).
_BARE_IDS = {"claude-": "anthropic"}


def full_spec(spec: str) -> str:
    """``spec`` with its provider: a bare ``claude-…`` id is ``anthropic:claude-…``."""
    if ":" not in spec:
        for start, prefix in _BARE_IDS.items():
            if spec.startswith(start):
                return f"{prefix}:{spec}"
    return spec


def nearest_models(spec: str, count: int = 3) -> list[str]:
    """The ids of ``spec``'s provider table closest to the model it names (difflib), none
    when it names one the table lists."""
    kind, _, model = full_spec(spec).partition(":")
    row = provider_of(kind)
    if row is None or not model:
        return []
    import difflib  # only here: the table is read at start-up, before anything else

    known = row.load().known_models()
    if model in known:
        return []
    return difflib.get_close_matches(model, known, n=count, cutoff=0.6)


def parse_price(text: str, spec: str | None = None) -> Price:
    """``IN/OUT`` in USD per million input / output tokens, for a model of ``spec`` (its
    provider's cache-write premium)."""
    from rio_ci.model.base import Price

    match = _PRICE.match(text.strip())
    if not match:
        raise UsageError(
            f"--price expects IN/OUT in USD per million tokens (e.g. 3/15), got {text!r}"
        )
    rates = float(match.group(1)), float(match.group(2))
    if not all(math.isfinite(rate) for rate in rates):  # 400 digits parse as infinity
        raise UsageError(f"--price {text!r}: too large to be a price")
    row = provider_of((spec or DEFAULT_SPEC).partition(":")[0]) or PROVIDERS[0]
    return Price.flat(*rates, row.cache_write_factor)


def priced_model(
    spec: str, *, effort: str, price: Price | None, stored: Mapping[str, Mapping[str, float]]
) -> Model:
    """The model of ``spec`` with a known price: ``price`` (``--price``), else the one an
    earlier run stored in the Session for this model (``stored``, by model name), else the
    model's own. A stored price wins over the table's, so every job of a Session counts cost
    the same way. Refuses (``UsageError``, exit 2) a model whose cost cannot be counted,
    before its credentials are looked at: the arguments alone decide that."""
    from rio_ci.model.base import Price

    named = build_model(spec, effort=effort, price=price, connect=False)
    kept = Price(**stored[named.name]) if named.name in stored else None
    if price is not None and kept is not None and price != kept:
        # Usage already counted at the stored price: another one would change what the
        # budgets count mid-Session (a price of 0 would lift cost_usd altogether).
        raise UsageError(
            f"this Session already counts {named.name} at {kept.input:g}/{kept.output:g} USD "
            f"per million input/output tokens (stored by an earlier run); --price "
            f"{price.input:g}/{price.output:g} would change how its budgets are counted"
        )
    if price is None:
        price = kept or named.price()
    if price is None and (near := nearest_models(spec)):
        raise UsageError(
            f"unknown model {full_spec(spec).partition(':')[2]!r}; the nearest known: "
            f"{', '.join(near)} (or, for a model the table does not list, give --price IN/OUT)"
        )
    if price is None:
        raise UsageError(
            f"{named.name} has no known price, so its cost cannot be counted against the "
            f"cost_usd budget; give --price IN/OUT (USD per million input / output tokens)"
        )
    return build_model(spec, effort=effort, price=price)


def fallback_spec(spec: str, fallback: str) -> str:
    """The spec of ``--fallback-model``: a full spec as given; a bare model id on the
    provider of ``spec`` (``--model bedrock:A --fallback-model B`` means ``bedrock:B``)."""
    kind, sep, _ = full_spec(fallback).partition(":")
    if sep and (kind == SCRIPTED or provider_of(kind) is not None):
        return full_spec(fallback)
    provider = (spec or DEFAULT_SPEC).partition(":")[0]
    return f"{provider if provider_of(provider) is not None else DEFAULT_SPEC}:{fallback}"


def priced_models(
    spec: str,
    fallback: str | None,
    *,
    effort: str,
    price: Price | None,
    stored: Mapping[str, Mapping[str, float]],
) -> tuple[Model, Model | None]:
    """The model of ``spec`` and the fallback model (``--fallback-model``, asked after a
    refusal), both priced as ``priced_model`` prices one. ``price`` is the main model's; the
    fallback's price comes from the Session or the table, and an unpriced fallback is
    refused (exit 2) like an unpriced ``--model``."""
    model = priced_model(spec, effort=effort, price=price, stored=stored)
    if fallback is None or not fallback.strip():
        return model, None
    other = fallback_spec(spec, fallback.strip())
    try:
        return model, priced_model(other, effort=effort, price=None, stored=stored)
    except UsageError as exc:
        raise UsageError(f"--fallback-model: {exc}") from None
