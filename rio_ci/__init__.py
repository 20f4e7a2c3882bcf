"""rio_ci: a durable autonomous coding agent whose whole memory is one SQLite Session.

This package's top level stays import-light: Cells import ``rio_ci.api`` from a
stdlib-only environment, so nothing here may pull in third-party modules.
"""

__version__ = "0.1.0"
