"""The harness's own git: a git directory and a configuration that no Cell can write.

The checkout's ``.git/config``, its hooks, ``~/.gitconfig`` and the working tree's
``.gitattributes`` are all writable by the Cells that ran in the checkout, and git would
honour any of them: an ``http.proxy`` or a ``url.*.insteadOf`` that reroutes the token, a
hook, a ``filter.*.clean`` driver, a ``gpg.program``, an ``include.path``. So every git
command rio-ci runs on GitHub runs with

- ``GIT_DIR`` a git directory of the harness's own (under ``$RUNNER_TEMP/rio``: a copy of
  the checkout's objects and refs made before any Cell ran; ``GIT_WORK_TREE`` is the
  checkout), so the checkout's ``.git`` — config, hooks, ``info/attributes``, index — is
  never read;
- git itself as found once at the command's start where no Cell can write
  (``rio_ci.untrusted.programs``), never by name on the job's ``PATH``, which may name the checkout;
- no system or global configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL`` is the
  null device; the environment every git of rio-ci's gets, ``rio_ci.untrusted.gitenv``), ``HOME``
  and ``XDG_CONFIG_HOME`` a directory of the harness's (no ``~/.gitconfig``, no ``~/.netrc``), no
  system attributes (``GIT_ATTR_NOSYSTEM``), and no ``GIT_*`` variable inherited from the job
  (a step's ``$GITHUB_ENV`` could have set one);
- the settings of ``rio_ci.untrusted.gitenv.HARDENED`` and ``SETTINGS`` given on git's command scope
  (``GIT_CONFIG_COUNT``): no hooks, no fsmonitor, no credential helper, no signing, no
  redirects, certificates verified, and only the origin's transport allowed. With no filter
  driver configured anywhere, a ``filter=`` attribute in the working tree names nothing and
  runs nothing: the agent's changes are committed as the bytes in the working tree
  (``core.autocrlf`` off);
- the remote passed as a URL (the origin the checkout named before any Cell ran, kept in
  this git directory's own configuration), and the token, when there is one, as an
  ``http.<that URL>.extraHeader`` on git's command scope — in git's environment, never on
  a command line or in a file, and sent to no other URL (redirects are not followed).

Every command has a time limit (``TIMEOUT``, or the ``Git``'s own): past it, git and every
process it started are stopped and the caller gets a ``ForgeError`` saying so, like any
other failure of git's (docs/github.md, "The tree cannot hang the checkpoint").

``safe.directory`` is ``*`` on the command scope: the checkout may belong to the Cell user,
and this git directory is the harness's own, so git's ownership check has nothing to add.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from rio_ci.core.errors import ForgeError
from rio_ci.untrusted import programs
from rio_ci.untrusted.gitenv import git_environment

NAME, EMAIL = "rio-ci", "rio-ci@users.noreply.github.com"
TIMEOUT = 300.0  # seconds one git command may run
# Command-scope settings, after rio_ci.untrusted.gitenv.HARDENED: they outrank every configuration
# file git could still read.
SETTINGS: tuple[tuple[str, str], ...] = (
    ("core.attributesFile", os.devnull),
    ("core.excludesFile", os.devnull),
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("http.sslVerify", "true"),
    ("http.followRedirects", "false"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.directory", "*"),
    ("protocol.allow", "never"),
    ("user.name", NAME),
    ("user.email", EMAIL),
)
# Inherited variables git or ssh would act on, besides every GIT_* one.
_DROPPED = ("SSH_ASKPASS", "XDG_CONFIG_HOME", "HOME", "EDITOR", "VISUAL", "PAGER")


def scheme(url: str) -> str:
    """The transport git uses for ``url``: ``https``, ``http``, ``ssh`` or ``file`` (a
    local path, or ``file://``). An ``scp``-like ``host:path`` is ssh."""
    parts = urlsplit(url)
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        return parts.scheme.lower()
    if ":" in url.split("/", 1)[0]:
        return "ssh"
    return "file"


@dataclass(frozen=True)
class Git:
    """One git directory of the harness's (``git_dir``), optionally with the checkout as
    its working tree. ``home`` is the harness's directory git sees as ``HOME``."""

    git_dir: Path
    work_tree: Path | None = None
    timeout: float = TIMEOUT

    @property
    def home(self) -> Path:
        return self.git_dir.parent / "git-home"

    def tree(self) -> Path:
        if self.work_tree is None:
            raise ForgeError(f"the git directory {self.git_dir} has no working tree")
        return self.work_tree

    def run(
        self,
        *args: str,
        remote: str | None = None,
        token: str | None = None,
        check: bool = True,
        stdin: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``git ARGS`` under the rules above; ``remote`` allows its transport and,
        with ``token``, gives the token to that URL only. ``check``: a failure raises
        ``ForgeError`` with git's last line. Past ``timeout`` seconds git's process group is
        killed and ``ForgeError`` raised, ``check`` or not."""
        git = programs.find("git")
        if git is None:
            raise ForgeError(programs.missing("git"))
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with subprocess.Popen(
            [git, *args],
            cwd=self.work_tree or self.git_dir.parent,
            env=self.environment(remote, token, extra_env),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # one process group: stopped whole on a timeout
        ) as process:
            try:
                out, err = process.communicate(stdin, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise ForgeError(
                    f"git {args[0]} did not finish within {self.timeout:g} s and was stopped"
                ) from None
        done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        if check and done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise ForgeError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
        return done

    def environment(
        self, remote: str | None, token: str | None, extra_env: dict[str, str] | None = None
    ) -> dict[str, str]:
        places = {
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home),
            "GIT_DIR": str(self.git_dir),
        }
        if self.work_tree is not None:
            places["GIT_WORK_TREE"] = str(self.work_tree)
        settings = list(SETTINGS)
        if remote:
            settings.append((f"protocol.{scheme(remote)}.allow", "always"))
            if token:
                basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
                settings.append((f"http.{remote}.extraHeader", f"AUTHORIZATION: basic {basic}"))
        env = git_environment(settings, dropped=_DROPPED, **places)
        env.update(extra_env or {})
        return env
