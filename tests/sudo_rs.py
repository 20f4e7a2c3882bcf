"""A stand-in for sudo-rs, the ``sudo`` of Ubuntu 25.10 and later (so of ``ubuntu-latest``),
for the tests' ``ubuntu-26.04`` runner profile (tests/runners.py). No sudo-rs package is
reachable from the machines the tests run on, so this program plays its documented
environment policy and then really becomes root, through the classic sudo installed here.

What it implements, from sudo-rs's own pages (docs/man/sudo.8.md, docs/man/sudoers.5.md) and
source (src/sudo/cli/mod.rs, src/sudo/env/environment.rs, src/defaults/mod.rs):

- ``-E`` (and a bare ``--preserve-env``) is ignored with the warning "preserving the entire
  environment is not supported, '-E' is ignored";
- ``env_reset`` cannot be disabled: the command gets a new environment. From the invoking
  user's, only ``env_keep`` names (default: COLORS DISPLAY HOSTNAME KRB5CCNAME LS_COLORS PATH
  PS1 PS2 XAUTHORITY XAUTHORIZATION XDG_CURRENT_DESKTOP) and ``env_check`` names whose value
  holds no ``%`` or ``/`` (COLORTERM LANG LANGUAGE LC_* LINGUAS TERM TZ; TZ by its own rule)
  are kept, never a value starting with ``()``, and PATH not when ``secure_path`` is set
  (CONFIG carries /etc/sudoers' one, which sudo-rs would read);
- HOME, SHELL (the target's unless kept), LOGNAME and USER are set for the target user,
  SUDO_COMMAND, SUDO_UID, SUDO_GID, SUDO_USER and SUDO_HOME for the invoking one; PATH is
  ``secure_path`` when set, else ``/usr/bin:/bin:/usr/sbin:/sbin`` unless kept; TERM is
  ``unknown`` unless kept; PS1 is SUDO_PS1 when that is set;
- ``--preserve-env=LIST`` and ``VAR=value`` arguments before the command: the named
  variables (the invoking values; unset names are skipped) are added verbatim when the
  matched command is ``ALL`` (SETENV is implied for it, as the test sudoers entries say),
  else only when env_keep or env_check would keep them (otherwise: an error);
- ``-V`` prints ``sudo-rs VERSION``; ``-n``, ``-H`` and ``--`` as sudo; only root as target.
- Standard input, output and error reach the command as they are (not a terminal: inherited).

Then it runs ``/usr/bin/sudo -n -C 4`` (the test's sudoers entry grants ``closefrom_override``)
on itself in its second part, handing it exactly that environment on file descriptor 3,
which runs the command as root with it. Usage: ``sudo_rs.py CONFIG.json SUDO-ARGS...``;
CONFIG says the version to print, the real sudo, ``secure_path``, ``setenv`` (false: the
matched command is not ``ALL``), ``argv_log`` (a file each command line is appended to, as
sudo would log it) and ``"stdin": "null"`` for a sudo that hands the command no standard
input (the profile where the hand-over is lost).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
from collections.abc import Iterator
from typing import Any

ENV_KEEP = [
    "COLORS",
    "DISPLAY",
    "HOSTNAME",
    "KRB5CCNAME",
    "LS_COLORS",
    "PATH",
    "PS1",
    "PS2",
    "XAUTHORITY",
    "XAUTHORIZATION",
    "XDG_CURRENT_DESKTOP",
]
ENV_CHECK = ["COLORTERM", "LANG", "LANGUAGE", "LC_*", "LINGUAS", "TERM", "TZ"]
PATH_DEFAULT = "/usr/bin:/bin:/usr/sbin:/sbin"
ZONEINFO = "/usr/share/zoneinfo"
STAGE_TWO = "--rio-test-stage-two"


def fail(message: str, code: int = 1) -> None:
    print(f"sudo: {message}", file=sys.stderr)
    raise SystemExit(code)


def listed(name: str, patterns: list[str]) -> bool:
    return any(re.fullmatch(".*".join(map(re.escape, p.split("*"))), name) for p in patterns)


def safe_tz(value: str) -> bool:
    checked = value.removeprefix(":")
    if checked.startswith("/") and not checked.startswith(ZONEINFO + "/"):
        return False
    printable = all(
        c.isascii() and (c.isalnum() or (c.isprintable() and c != " ")) for c in checked
    )
    return ".." not in checked and printable and len(checked) < 4096


def should_keep(name: str, value: str, secure_path: str | None) -> bool:
    if value.startswith("()") or (secure_path is not None and name == "PATH"):
        return False
    if name == "TZ":
        return listed(name, ENV_KEEP) or (listed(name, ENV_CHECK) and safe_tz(value))
    if listed(name, ENV_CHECK):
        return "%" not in value and "/" not in value
    return listed(name, ENV_KEEP)


def secure_path_of(sudoers: str) -> str | None:
    """The ``Defaults secure_path`` of a sudoers file's text (sudo-rs reads /etc/sudoers, a
    file only root may read: the runner profile reads it for this program's CONFIG)."""
    found = re.findall(r'^\s*Defaults\s+secure_path\s*=\s*"?([^"\n]*)"?', sudoers, re.MULTILINE)
    return found[-1] if found else None


def parse(args: list[str]) -> dict[str, Any]:
    """sudo-rs's command line, the part these tests use."""
    options: dict[str, Any] = {"requested": [], "command": [], "version": False}
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            options["command"] = list(rest)
        elif arg.startswith("-") and len(arg) > 2 and not arg.startswith("--"):
            return parse([*options_as_given(options), *(f"-{c}" for c in arg[1:]), *rest])
        elif arg.startswith("-"):
            option(arg, rest, options)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", arg, re.DOTALL):
            options["requested"].append(tuple(arg.split("=", 1)))
        else:
            options["command"] = [arg, *rest]
    return options


def options_as_given(options: dict[str, Any]) -> list[str]:
    """What ``parse`` read so far, as arguments again (to expand ``-nE`` in place)."""
    given = ["-V"] if options["version"] else []
    return given + [f"{k}={v}" for k, v in options["requested"]]


def option(arg: str, rest: Iterator[str], options: dict[str, Any]) -> None:
    if arg in ("-E", "--preserve-env"):
        print(
            f"sudo: preserving the entire environment is not supported, '{arg}' is ignored",
            file=sys.stderr,
        )
    elif arg.startswith("--preserve-env="):
        names = arg.split("=", 1)[1].split(",")
        options["requested"] += [(n, os.environ[n]) for n in names if n in os.environ]
    elif arg in ("-V", "--version"):
        options["version"] = True
    elif arg in ("-u", "--user"):
        if next(rest, None) not in ("root", "#0"):
            fail("these tests' sudo-rs runs commands as root only")
    elif arg not in ("-n", "--non-interactive", "-H", "--set-home"):
        fail("invalid option provided")


def resolve(command: str, path: str) -> str:
    found = command if "/" in command else shutil.which(command, path=path)
    if found is None:
        fail(f"'{command}': command not found")
    assert found is not None
    return found


def target_environment(
    invoking: dict[str, str],
    requested: list[tuple[str, str]],
    command: list[str],
    secure: str | None,
    setenv: bool = True,
) -> dict[str, str]:
    user, root = pwd.getpwuid(os.getuid()), pwd.getpwnam("root")
    env = {k: v for k, v in invoking.items() if should_keep(k, v, secure)}
    env["SUDO_COMMAND"] = " ".join(command)[:4096]
    env.update(
        SUDO_UID=str(user.pw_uid),
        SUDO_GID=str(user.pw_gid),
        SUDO_USER=user.pw_name,
        SUDO_HOME=user.pw_dir,
    )
    env.setdefault("SHELL", root.pw_shell)
    env.setdefault("HOME", root.pw_dir)
    if "LOGNAME" not in env and "USER" not in env:
        env.update(LOGNAME=root.pw_name, USER=root.pw_name)
    elif "LOGNAME" not in env:
        env["LOGNAME"] = env["USER"]
    elif "USER" not in env:
        env["USER"] = env["LOGNAME"]
    if secure is not None:
        env["PATH"] = secure
    env.setdefault("PATH", PATH_DEFAULT)
    env.setdefault("TERM", "unknown")
    if "SUDO_PS1" in invoking:
        env["PS1"] = invoking["SUDO_PS1"]
    if not setenv:  # checked as the invoking environment is
        refused = [k for k, v in requested if not should_keep(k, v, secure)]
        if refused:
            fail(f"you are not allowed to set the following environment variables: {refused}")
    env.update(requested)  # SETENV (implied for ALL): added as they are
    return env


def become_root(config: dict[str, Any], command: list[str], env: dict[str, str]) -> None:
    """Run ``command`` as root with exactly ``env``: classic sudo runs this program's second
    part, which reads ``env`` from descriptor 3 and ``exec``s the command."""
    handed = os.memfd_create("sudo-rs-stand-in-environment", 0)
    os.write(handed, json.dumps(env).encode("utf-8", "surrogateescape"))
    os.lseek(handed, 0, os.SEEK_SET)
    os.dup2(handed, 3)
    if config.get("stdin") == "null":
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
    real = config["real_sudo"]
    this = os.path.abspath(__file__)
    os.execv(
        real,
        [real, "-n", "-C", "4", "--", sys.executable, "-I", this, STAGE_TWO, *command],
    )


def stage_two(command: list[str]) -> None:
    with os.fdopen(3, "rb") as stream:
        env = json.loads(stream.read().decode("utf-8", "surrogateescape"))
    os.execve(command[0], command, env)


def main(argv: list[str]) -> None:
    if argv and argv[0] == STAGE_TWO:
        stage_two(argv[1:])
        return
    with open(argv[0]) as stream:
        config = json.load(stream)
    if config.get("argv_log"):  # what sudo-rs itself would log of the command line
        with open(config["argv_log"], "a") as log:
            log.write(json.dumps(argv[1:]) + "\n")
    options = parse(argv[1:])
    if options["version"]:
        print(f"sudo-rs {config['version']}")
        return
    if not options["command"]:
        fail("expected a command")
    secure = config.get("secure_path")
    invoking = dict(os.environ)
    path = secure if secure is not None else invoking.get("PATH", PATH_DEFAULT)
    command = [resolve(options["command"][0], path), *options["command"][1:]]
    setenv = config.get("setenv", True)
    env = target_environment(invoking, options["requested"], command, secure, setenv)
    become_root(config, command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
