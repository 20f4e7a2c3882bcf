"""Which environment variables are credentials: the one rule, read by the Owner (what
Workers never see, what is redacted from output), every git rio-ci runs
(``rio_ci.untrusted.gitenv``: what it drops), and start-up (a process that still holds one
re-executes itself without it first: ``rio_ci.start``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)


def secret_names(
    environ: Mapping[str, str], keep: Iterable[str] = (), extra: Iterable[str] = ()
) -> set[str]:
    """Names of the credentials in ``environ``: credential-looking names and the names in
    ``extra`` (a Session's ``--secret``), except those in ``keep``."""
    kept, named = set(keep), set(extra)
    return {k for k in environ if (SECRET_NAME.search(k) or k in named) and k not in kept}
