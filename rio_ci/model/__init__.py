"""Models answer a Turn with one ``step`` call. See ``base.Model``; ``build_model`` turns a
``--model`` spec into one.

The rule of this folder: a model sees the Turn it is asked about (with the environment
block the harness has it build) and talks to its provider; it imports nothing of the Session,
the store, the Owner or the GitHub layer (``tests/test_architecture.py`` checks the imports),
and what it answers is committed by the harness before anything acts on it."""

from rio_ci.model.providers import build_model

__all__ = ["build_model"]
