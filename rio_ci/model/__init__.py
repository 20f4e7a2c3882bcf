"""Models answer a Turn with one ``step`` call. See ``base.Model``; ``build_model`` turns a
``--model`` spec into one through the providers table (``providers``).

What is the same whatever the provider lives here: the ``Model`` seam and its values
(``base``), what a model reads of a Turn and the system prompt (``turn``, ``prompt.md``), the
``step`` tool's schema as plain JSON Schema (``step_tool``), which pictures fit a request
(``pictures``), the environment block (``environment``) and the scripted model. A provider
is one module (Claude's: ``claude/``) and one row of the table.

The rule of this folder: a model sees the Turn it is asked about (with the environment
block the harness has it build) and talks to its provider; it imports nothing of the Session,
the store, the Owner or the GitHub layer (``tests/quality/test_architecture.py`` checks the
imports), and what it answers is committed by the harness before anything acts on it. Only a
provider's own module imports its SDK.
"""

from rio_ci.model.providers import build_model

__all__ = ["build_model"]
