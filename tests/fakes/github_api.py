"""The fake GitHub REST API (kept under this name for existing imports); it lives in the
package ``fakes.github``: base (vocabulary), data (state and helpers), endpoints, server."""

from __future__ import annotations

from fakes.github import Failure, FakeGitHub, Recorded, Token

__all__ = ["Failure", "FakeGitHub", "Recorded", "Token"]
