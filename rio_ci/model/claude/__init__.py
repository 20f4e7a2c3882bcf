"""Claude through the Messages API (Anthropic, Amazon Bedrock or Google Vertex): the provider
module the ``claude`` row of the providers table names (rio_ci/model/providers.py).

- ``client``: ``AnthropicModel``, the ``Model``, and the SDK client for each platform;
- ``layout``: a Turn (rio_ci/model/turn.py) as content blocks, with the cache breakpoints;
- ``tool``: the ``step`` tool as the API takes it, and reading a reply's call;
- ``failures``: what an error answer means (transient or final);
- ``table`` with ``models.json``: what rio_ci knows of each Claude model (limits, list prices,
  the request features each accepts) and what one request may carry.

The three functions below are what the providers table asks of a provider module. Only
``build`` imports the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rio_ci.model.claude import table
from rio_ci.model.pictures import RequestLimits

if TYPE_CHECKING:
    from rio_ci.model.base import Model, Price

__all__ = ["build", "default_model", "picture_limits"]


def build(prefix: str, model: str, *, effort: str, price: Price | None, connect: bool) -> Model:
    """The Claude model ``model`` on the platform ``prefix`` names (``anthropic``,
    ``bedrock`` or ``vertex``); ``connect=False``: its name and price only, no client."""
    from rio_ci.model.claude.client import AnthropicModel

    return AnthropicModel(model, provider=prefix, effort=effort, price=price, connect=connect)


def default_model() -> str:
    """The model of a bare ``anthropic`` spec (the table's ``default``)."""
    return table.default_model()


def known_models() -> list[str]:
    """Every id and alias the table lists, for the nearest ids to one it does not."""
    return table.known_ids()


def picture_limits() -> RequestLimits:
    """What one request may carry of pictures (the table's ``request_limits``)."""
    return table.request_limits()
