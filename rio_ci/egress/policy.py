"""Where a Cell may connect (docs/network.md, "The allowlist").

A pattern is a host name (``pypi.org``), a wildcard (``*.pythonhosted.org``: every name under
the domain, not the domain itself) or an IP literal (``127.0.0.2``, ``[::1]``, ``::1``), each
with an optional ``:port``. Names compare case-insensitively, a trailing dot ignored. A name
pattern never admits an IP literal; an IP literal is admitted only by a pattern that lists it.

The modes: ``allowlist`` admits what a pattern lists; ``open`` admits every host; ``none``
refuses every host. In every mode but ``none`` the same rule holds for the special addresses
(loopback, link-local such as a cloud's metadata service at 169.254.169.254, multicast, "this
host"): they are refused unless listed as an IP literal, whether a request names the address
or a name that resolves to it (:meth:`Policy.reaches`).

Expected outcomes are values: :meth:`Policy.admits` returns a :class:`Verdict` with a reason
from ``REASONS``. A bad pattern or mode is a one-line ``UsageError``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable
from typing import Literal, NamedTuple, get_args

from rio_ci.core.errors import UsageError

Mode = Literal["allowlist", "open", "none"]
MODES: tuple[Mode, ...] = get_args(Mode)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Why a host was admitted or refused: the ``reason`` of every account of a connection.
LISTED = "listed"  # a pattern lists it
OPEN = "open"  # the mode admits every host
NOT_LISTED = "not_listed"  # no pattern lists it (allowlist)
NETWORK_NONE = "network_none"  # the mode refuses every host
SPECIAL = "loopback_or_link_local"  # a special address not listed as a literal
RESOLVES_TO_SPECIAL = "resolves_to_loopback_or_link_local"  # a name that leads to one
BAD_HOST = "bad_host"  # neither a host name nor an IP literal
REASONS = (LISTED, OPEN, NOT_LISTED, NETWORK_NONE, SPECIAL, RESOLVES_TO_SPECIAL, BAD_HOST)

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")
_SHAPE = "a host name, *.domain or an IP address, each with an optional :port"


class Verdict(NamedTuple):
    """What the policy says of one host and port: admitted or not, and why."""

    allowed: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One allowlist entry. ``host`` is a lower-case name, ``*.`` and a domain, or an
    address in its compressed form; ``address`` is set when the pattern is an IP literal."""

    host: str
    port: int | None = None
    address: Address | None = None

    def __str__(self) -> str:
        shown = f"[{self.host}]" if isinstance(self.address, ipaddress.IPv6Address) else self.host
        return shown if self.port is None else f"{shown}:{self.port}"

    def admits(self, name: str | None, address: Address | None, port: int) -> bool:
        """Whether this pattern lists a request for ``name`` (None for an IP literal) or
        ``address`` (None for a name) on ``port``."""
        if self.port is not None and self.port != port:
            return False
        if self.address is not None or address is not None:
            return self.address is not None and self.address == address
        assert name is not None
        if self.host.startswith("*."):
            return name.endswith(self.host[1:])
        return name == self.host


def parse(text: str) -> Pattern:
    """The pattern ``text`` stands for; UsageError (one line) when it is none."""
    try:
        host, port = split_host_port(text.strip(), None)
        return _pattern(host, port)
    except ValueError:
        raise UsageError(f"not a host pattern: {text!r} (write {_SHAPE})") from None


def _pattern(host: str, port: int | None) -> Pattern:
    address = address_of(host)
    if address is not None:
        return Pattern(address.compressed, port, address)
    wildcard = host.startswith("*.")
    name = normal_name(host[2:] if wildcard else host)
    if name is None:
        raise ValueError(host)
    return Pattern(f"*.{name}" if wildcard else name, port)


def parse_mode(text: str) -> Mode:
    """The mode ``text`` names; UsageError (one line) otherwise."""
    for mode in MODES:
        if text == mode:
            return mode
    raise UsageError(f"not a network mode: {text!r} (choose {', '.join(MODES)})")


def split_host_port(text: str, default: int | None) -> tuple[str, int | None]:
    """``host[:port]``, ``[v6][:port]`` or a bare IPv6 literal, split; ``default`` where no
    port is written. ValueError for anything else (an empty host, a bad port)."""
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or not inside or (rest and not rest.startswith(":")):
            raise ValueError(text)
        return f"[{inside}]", _port(rest[1:]) if rest else default
    if text.count(":") > 1:  # a bare IPv6 literal has no port
        return text, default
    host, colon, port = text.partition(":")
    if not host:
        raise ValueError(text)
    return host, _port(port) if colon else default


def _port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65536:
        raise ValueError(text)
    return int(text)


def address_of(host: str) -> Address | None:
    """The address ``host`` writes as an IP literal (``[v6]`` unbracketed, an IPv4-mapped
    IPv6 address as IPv4), or None when it is no literal."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def normal_name(host: str) -> str | None:
    """``host`` as a host name in lower case without a trailing dot, or None when it is not
    one. A name whose last label is all digits is none: an address is written only as an IP
    literal (``127.1`` and ``2130706433`` would reach 127.0.0.1 through a resolver)."""
    name = host.lower().removesuffix(".")
    if not _NAME.fullmatch(name) or name.rpartition(".")[2].isdigit():
        return None
    return name


def special(address: Address) -> bool:
    """The addresses a Cell reaches only when they are listed as literals: the host's own
    loopback, link-local (a cloud's metadata service), multicast, and "this host"."""
    this_network = isinstance(address, ipaddress.IPv4Address) and address.packed[0] == 0
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or this_network
    )


@dataclasses.dataclass(frozen=True)
class Policy:
    """A mode and the patterns it reads (``allowlist`` admits what they list; in every mode
    they are what lets a special address through)."""

    mode: Mode
    patterns: tuple[Pattern, ...] = ()

    @classmethod
    def of(cls, mode: str, patterns: Iterable[str] = ()) -> Policy:
        """UsageError (one line) for a bad mode or pattern."""
        return cls(parse_mode(mode), tuple(parse(text) for text in patterns))

    def admits(self, host: str, port: int) -> Verdict:
        """Whether a connection to ``host`` (a name or an IP literal, as a request writes it)
        on ``port`` may be made, before anything is resolved."""
        address = address_of(host)
        name = normal_name(host) if address is None else None
        if address is None and name is None:
            return Verdict(False, BAD_HOST)
        if self.mode == "none":
            return Verdict(False, NETWORK_NONE)
        listed = any(p.admits(name, address, port) for p in self.patterns)
        if address is not None and special(address) and not listed:
            return Verdict(False, SPECIAL)
        if listed:
            return Verdict(True, LISTED)
        if self.mode == "open":
            return Verdict(True, OPEN)
        return Verdict(False, NOT_LISTED)

    def reaches(self, address: Address, port: int) -> bool:
        """Whether an admitted name may lead to ``address``: any address but a special one
        not listed as a literal."""
        return not special(address) or any(p.admits(None, address, port) for p in self.patterns)


def allow_line(host: str, port: int, reason: str) -> str | None:
    """The command-line options that would admit a connection refused for ``reason``, or None
    where none would (a bad host; a name that resolves to a special address, which only that
    address listed as a literal admits)."""
    if reason not in (NOT_LISTED, SPECIAL, NETWORK_NONE):
        return None
    address = address_of(host)
    shown = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else host
    option = f"--allow-host {shown}:{port}"
    return f"--network allowlist {option}" if reason == NETWORK_NONE else option
