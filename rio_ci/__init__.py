"""rio_ci: a durable autonomous coding agent whose whole memory is one SQLite Session.

This package's top level stays import-light: Cells import ``rio_ci.api`` from a
stdlib-only environment, so nothing here may pull in third-party modules.

``__version__`` is the one place rio-ci's version is written: the package's metadata takes
it from here (``pyproject.toml``, ``dynamic``), and ``rio-ci --version``, the refusal of a
Session written by a newer release and the release checks read it (docs/releasing.md).
"""

__version__ = "0.2.0"
