"""What a connection through the egress proxy is, and how a Cell finds the proxy: plain values,
apart from the proxy's event loop (``rio_ci.egress.proxy``), so that an Owner whose Cells use
the host's network never imports asyncio (docs/network.md)."""

from __future__ import annotations

import dataclasses

from rio_ci.egress.netns import PORT

Tag = int | str  # the Execution a connection belongs to: a Cell id, or a validator's name
NO_REQUEST = "no_request"  # the connection closed, or was closed, before a request head


@dataclasses.dataclass
class Connection:
    """The proxy's account of one connection a Cell made to it. ``allowed`` and ``reason``
    are the policy's verdict (``allowed`` stays true for an admitted host that could not be
    reached: ``unresolved``, ``unreachable``); ``host`` is empty when no request was read."""

    tag: Tag | None
    host: str = ""
    port: int = 0
    allowed: bool = False
    reason: str = NO_REQUEST
    bytes_up: int = 0
    bytes_down: int = 0


def variables(port: int = PORT) -> dict[str, str]:
    """The environment that sends a Cell's tools through the proxy at 127.0.0.1:``port``.
    Each name is needed by some client: curl and git read ``http_proxy`` only in lower case,
    Python's urllib ignores ``ALL_PROXY``, each scheme has its own; ``NO_PROXY`` keeps a Cell's
    own loopback servers direct (the proxy, outside, would refuse them)."""
    url = f"http://127.0.0.1:{port}"
    found: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        found[name] = found[name.lower()] = url
    found["NO_PROXY"] = found["no_proxy"] = "localhost,127.0.0.1,::1"
    return found
