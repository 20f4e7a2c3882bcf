"""Which environment variables are credentials: the one rule, read by the Owner (what
Workers never see, what is redacted from output), every git rio-ci runs
(``rio_ci.untrusted.gitenv``: what it drops), and the SDK preload (a process that still holds one
re-executes itself without it first)."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
