"""Git's environment when the tree it runs on may be hostile: one rule for every git rio-ci runs.

A working tree the Cells ran in is theirs, ``.git/config`` included, and the process's own
environment may hold a credential, a ``GIT_*`` variable a step set, or a ``PATH`` that names the
checkout. So git gets none of the process's ``GIT_*`` variables and none of its credentials
(``rio_ci.core.credentials``); the harness's own ``PATH``
(``rio_ci.untrusted.programs.search_path``: the helpers git starts by name are found there,
never in the checkout); no system or global
configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL`` the null device), no template
directory and no translations (both are read from ``/usr/share``, which a runner image may
leave writable by every user), no system attributes, no terminal prompt and no askpass
program; and its settings go on git's command scope (``GIT_CONFIG_COUNT``), which outranks
every configuration file git could still read, starting with ``HARDENED``: no hooks, no
fsmonitor, no untracked cache.

git itself is the one ``rio_ci.untrusted.programs`` found. Each caller adds what its own git needs
on top: the model's ``git status`` (``rio_ci/model/environment_block.py``) also refuses a tree that
declares filter drivers; the harness's own git (``rio_ci/github/git.py``) has a git directory
and a home of its own and many more settings.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.untrusted import programs

__all__ = ["HARDENED", "git_environment"]

# The settings no git rio-ci runs may take from a tree: each would run a program of the tree's.
HARDENED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
)


def git_environment(
    settings: Sequence[tuple[str, str]] = (),
    *,
    dropped: Collection[str] = (),
    **variables: str,
) -> dict[str, str]:
    """The environment for one git command: this process's, without any ``GIT_*`` variable, any
    credential or any name in ``dropped``, and with the harness's ``PATH``; with the rules
    above, then ``variables``, and
    ``HARDENED`` followed by ``settings`` on git's command scope (always both, so no caller
    can forget ``HARDENED``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") and k not in dropped and not SECRET_NAME.search(k)
    }
    env.update(
        PATH=programs.search_path(),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="",
        # No template directory: a runner image may leave /usr/share/git-core/templates
        # writable by every user (GitHub's Ubuntu images make /usr/share world-writable), and
        # `git init` would copy a hook or a config from it into a git directory of ours.
        GIT_TEMPLATE_DIR="",
        # No translations: git's messages come from /usr/share/locale, as writable there, and
        # a message catalogue supplies the format strings git prints with.
        LC_ALL="C",
        LANGUAGE="",
    )
    env.update(variables)
    scoped = (*HARDENED, *settings)
    env["GIT_CONFIG_COUNT"] = str(len(scoped))
    for index, (key, value) in enumerate(scoped):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env
