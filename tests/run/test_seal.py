"""rio-ci's own install, sealed (docs/design.md, "rio-ci's own install, sealed"): before the
first Cell of an Owner runs as a Cell user, whatever that user could write of rio-ci's
interpreter, standard library, lib-dynload, site-packages and the folders above them is
closed, and one line names it; what cannot be closed refuses the Owner.

Each test shows the Cell user writing first (the control: what a Cell could do without the
seal), then the same write refused. A real Cell user of the test's own (``cell_user``), real
files; the slow ones run a real Owner on a copy of this Python left open the way GitHub's
images leave the tool cache (``chmod -R 777``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from action_job import WAIT, Repository, labeled, script
from fakes.github_api import FakeGitHub

import rio_ci
from rio_ci.core.errors import RioError
from rio_ci.run.confinement.seal import Install, seal
from rio_ci.run.confinement.user import CellUser
from tests.kit import ROOT, add, cli_env, cmd_cell, python_with
from tests.session_cli import CliSession

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd"),
    reason="a Cell user of the test's own needs root on Linux (as in CI)",
)
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
ZIP = f"python{sys.version_info.major}{sys.version_info.minor}.zip"


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-seal-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def user(cell_user: str) -> CellUser:
    return CellUser.ensure(cell_user)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def as_user(user: CellUser, probe: str) -> list[str]:
    """What a Cell of ``user`` prints running the shell ``probe``."""
    done = subprocess.run(
        ["sh", "-c", probe],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split()


def sealed(user: CellUser, install: Install) -> list[str]:
    said: list[str] = []
    seal(user, said.append, install)
    return said


def attempt(name: str, shell: str) -> str:
    return f"({shell}) 2>/dev/null && echo {name}=written || echo {name}=refused\n"


# --- what is closed ---------------------------------------------------------------------------


def test_a_standard_library_file_every_user_may_write_is_closed_and_named(
    place: Path, user: CellUser
) -> None:
    stdlib = place / "python" / "lib" / VERSION
    stdlib.mkdir(parents=True)
    for name, bits in (("os.py", 0o666), ("json.py", 0o644)):
        (stdlib / name).write_text("")
        (stdlib / name).chmod(bits)
    probe = attempt("os", f"echo '# a Cell was here' >> {stdlib}/os.py")
    assert as_user(user, probe) == ["os=written"]

    said = sealed(user, Install(trees=(str(stdlib),)))

    assert said == [
        f"closed 1 file of its own interpreter and packages that the Cell user {user.name} "
        f"could write: {stdlib}/os.py (was 0666)"
    ]
    # the others' bit only: the group is root's, the harness's own
    assert mode(stdlib / "os.py") == 0o664 and mode(stdlib / "json.py") == 0o644
    assert as_user(user, probe) == ["os=refused"]
    assert sealed(user, Install(trees=(str(stdlib),))) == []  # once closed, nothing to say


def test_a_folder_above_every_user_may_write_is_closed_and_one_with_the_sticky_bit_is_left(
    place: Path, user: CellUser
) -> None:
    """A rename in a folder above replaces the whole install; with the sticky bit only the
    owner of an entry may rename or remove it, so that folder stays as every user's."""
    shared = place / "shared"
    cache = shared / "toolcache"
    stdlib = cache / "python" / "lib" / VERSION
    stdlib.mkdir(parents=True)
    shared.chmod(0o1777)
    cache.chmod(0o777)
    python = cache / "python"
    probe = attempt("replaced", f"mv {python} {python}.moved && mv {python}.moved {python}")
    probe += attempt("shared", f"touch {shared}/mine && rm {shared}/mine")
    assert as_user(user, probe) == ["replaced=written", "shared=written"]

    said = sealed(user, Install(trees=(str(stdlib),)))

    assert said == [
        f"closed 1 folder of its own interpreter and packages that the Cell user {user.name} "
        f"could write: {cache} (was 0777)"
    ]
    assert mode(cache) == 0o775 and mode(shared) == 0o1777
    assert as_user(user, probe) == ["replaced=refused", "shared=written"]


def test_inside_the_install_the_sticky_bit_excuses_nothing(place: Path, user: CellUser) -> None:
    """A new entry inside is picked up: a ``sitecustomize.py`` beside the standard library,
    a ``python311.zip`` where ``sys.path`` names one that does not exist."""
    lib = place / "lib"
    stdlib = lib / VERSION
    stdlib.mkdir(parents=True)
    lib.chmod(0o1777)
    stdlib.chmod(0o1777)
    probe = attempt("module", f"touch {stdlib}/sitecustomize.py && rm {stdlib}/sitecustomize.py")
    probe += attempt("zip", f"touch {lib}/{ZIP} && rm {lib}/{ZIP}")
    assert as_user(user, probe) == ["module=written", "zip=written"]

    said = sealed(user, Install(trees=(str(stdlib),), folders=(str(lib),)))

    assert said == [
        f"closed 2 folders of its own interpreter and packages that the Cell user {user.name} "
        f"could write: {lib} (was 1777), {stdlib} (was 1777)"
    ]
    assert mode(lib) == 0o1775 and mode(stdlib) == 0o1775
    assert as_user(user, probe) == ["module=refused", "zip=refused"]


def test_a_link_in_the_install_is_neither_followed_nor_changed(place: Path, user: CellUser) -> None:
    outside = place / "outside"
    outside.mkdir()
    (outside / "module.py").write_text("")
    outside.chmod(0o777)
    (outside / "module.py").chmod(0o666)
    packages = place / "site-packages"
    packages.mkdir()
    (packages / "linked").symlink_to(outside)
    (packages / "linked.py").symlink_to(outside / "module.py")

    assert sealed(user, Install(trees=(str(packages),))) == []

    assert mode(outside) == 0o777 and mode(outside / "module.py") == 0o666
    assert os.readlink(packages / "linked") == str(outside)


def test_the_cell_users_group_loses_its_write_bit_and_the_harness_group_keeps_its_own(
    place: Path, user: CellUser
) -> None:
    packages = place / "site-packages"
    packages.mkdir()
    modes = {"theirs.py": (user.gid, 0o664), "everyone.py": (0, 0o666), "ours.py": (0, 0o664)}
    for name, (group, bits) in modes.items():
        (packages / name).write_text("")
        os.chown(packages / name, 0, group)
        (packages / name).chmod(bits)
    probe = attempt("theirs", f"echo x >> {packages}/theirs.py")
    probe += attempt("ours", f"echo x >> {packages}/ours.py")
    assert as_user(user, probe) == ["theirs=written", "ours=refused"]

    said = sealed(user, Install(trees=(str(packages),)))

    assert said == [
        f"closed 2 files of its own interpreter and packages that the Cell user {user.name} "
        f"could write: {packages}/everyone.py (was 0666), {packages}/theirs.py (was 0664)"
    ]
    # root's group (the harness's) keeps its bit where others lose theirs
    assert mode(packages / "everyone.py") == 0o664
    assert mode(packages / "theirs.py") == 0o644 and mode(packages / "ours.py") == 0o664
    assert as_user(user, probe) == ["theirs=refused", "ours=refused"]


def test_many_entries_are_named_up_to_five_and_counted_under_their_folder(
    place: Path, user: CellUser
) -> None:
    stdlib = place / "lib" / VERSION
    (stdlib / "email").mkdir(parents=True)
    for name in ("a.py", "b.py", "email/c.py", "email/d.py", "email/e.py", "email/f.py"):
        (stdlib / name).write_text("")
        (stdlib / name).chmod(0o666)
    stdlib.chmod(0o777)

    said = sealed(user, Install(trees=(str(stdlib),)))

    shown = ", ".join(f"{stdlib}/{name} (was 0666)" for name in ("a.py", "b.py", "email/c.py"))
    assert said == [
        f"closed 7 entries (1 folder, 6 files) of its own interpreter and packages that the "
        f"Cell user {user.name} could write: {stdlib} (was 0777), {shown}, {stdlib}/email/d.py "
        f"(was 0666) and 2 more under {stdlib}/email"
    ]


# --- what refuses the Owner -------------------------------------------------------------------


def test_an_entry_the_cell_user_owns_refuses_and_changes_nothing(
    place: Path, user: CellUser
) -> None:
    """An earlier Cell may have written it: closing it now would not take that back."""
    stdlib = place / VERSION
    stdlib.mkdir()
    planted = stdlib / "sitecustomize.py"
    planted.write_text("")
    os.chown(planted, user.uid, user.gid)
    (stdlib / "os.py").write_text("")
    (stdlib / "os.py").chmod(0o666)

    with pytest.raises(RioError) as refused:
        sealed(user, Install(trees=(str(stdlib),)))

    assert str(refused.value) == (
        f"the Cell user {user.name} owns {planted} in rio-ci's own interpreter and packages: "
        "a Cell may have changed them already, so no Cell runs (and never as root instead); "
        "reinstall them, or remove what that user owns there, and start again"
    )
    assert mode(stdlib / "os.py") == 0o666


READ_ONLY = """\
import json, pwd, sys
from rio_ci.run.confinement.user import CellUser
from rio_ci.run.confinement.seal import Install, seal
user = CellUser.of(pwd.getpwnam(sys.argv[1]))
said = []
try:
    seal(user, said.append, Install(trees=(sys.argv[2],)))
    print(json.dumps({"said": said}))
except Exception as exc:
    print(json.dumps({"said": said, "error": str(exc)}))
"""


def in_mount_namespace(place: Path, mounts: str, user: CellUser, tree: Path) -> dict[str, str]:
    """Seal ``tree`` in a mount namespace of its own where ``mounts`` ran first."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m) to mount a read-only file system in")
    python = [sys.executable, "-c", READ_ONLY]
    done = subprocess.run(
        ["unshare", "-m", "sh", "-ec", f'{mounts}\nexec "$@"', "-", *python, user.name, str(tree)],
        cwd=place,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_a_file_system_read_only_as_a_whole_is_left_as_it_is(place: Path, user: CellUser) -> None:
    tree = place / "squashed"
    tree.mkdir()
    mounts = (
        f"mount -t tmpfs -o size=1m,mode=0777 tmpfs {tree}\n"
        f"touch {tree}/os.py && chmod 0666 {tree}/os.py\n"
        f"mount -o remount,ro {tree}"
    )

    assert in_mount_namespace(place, mounts, user, tree) == {"said": []}


def test_a_read_only_mount_of_a_writable_file_system_cannot_be_closed_and_refuses(
    place: Path, user: CellUser
) -> None:
    """The files stay writable through the file system's other mounts (here, its own
    folder), so the read-only view is no seal; and rio-ci cannot close them through it."""
    writable = place / "writable"
    writable.mkdir()
    (writable / "os.py").write_text("")
    writable.chmod(0o777)
    view = place / "view"
    view.mkdir()
    mounts = f"mount --bind {writable} {view}\nmount -o remount,bind,ro {view}"

    result = in_mount_namespace(place, mounts, user, view)

    assert result["said"] == []
    assert result["error"] == (
        f"cannot close {view} (was 0777: Read-only file system) in rio-ci's own interpreter "
        f"and packages, which the Cell user {user.name} could write: no Cell runs (and never "
        "as root instead); make them writable by their owner alone and start again"
    )
    assert mode(writable) == 0o777


# --- what is rio-ci's own ---------------------------------------------------------------------


def test_what_this_interpreter_runs_is_its_own_install() -> None:
    install = Install.of_this_process()
    real = os.path.realpath

    def covered(path: str) -> bool:
        return any(path == t or path.startswith(t + os.sep) for t in install.trees)

    assert real(sys.executable) in install.files
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        library = Path(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"))
        assert real(library) in install.files
    assert covered(real(os.path.dirname(os.__file__)))  # the standard library
    dynload = [p for p in sys.path if p.endswith("lib-dynload")]
    assert dynload and all(covered(real(p)) for p in dynload)
    assert covered(real(sysconfig.get_path("purelib")))  # site-packages
    assert covered(real(os.path.dirname(rio_ci.__file__)))
    missing = [p for p in sys.path if p.endswith(".zip") and not os.path.exists(p)]
    assert all(real(os.path.dirname(p)) in install.folders for p in missing)
    assert real(os.path.dirname(sys.executable)) in install.folders  # where pyvenv.cfg is read
    if sys.prefix != sys.base_prefix:  # a venv: all of it, but not the base's site-packages
        assert real(sys.prefix) in install.trees
        base = sysconfig.get_paths(vars={"base": sys.base_prefix})["purelib"]
        assert real(base) in install.left_out
    # not the test folders pytest puts on sys.path, nor a working directory
    assert not covered(str(ROOT / "tests")) and not covered(str(ROOT))


# --- a real Owner, on an interpreter the way GitHub's images leave it ------------------------


@dataclass(frozen=True)
class OpenPython:
    """A copy of this Python's base install in ``open/python`` (without its tests and
    site-packages) and a venv made from it elsewhere that runs this checkout's rio_ci."""

    open: Path
    base: Path
    stdlib: Path
    venv_python: Path

    def reopen(self) -> None:
        """``chmod -R 777`` of the folder holding it, as the hosted images leave /opt."""
        for path in entries(self.open):
            os.chmod(path, 0o777)

    def environment(self, **extra: str) -> dict[str, str]:
        """Its own libpython loaded (where this Python has one), not this one's."""
        return cli_env(LD_LIBRARY_PATH=str(self.base / "lib"), **extra)


LEFT_OUT = {"test", "site-packages", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}


def copy_of_python(into: Path) -> Path:
    base = Path(sys.base_prefix)
    (into / "bin").mkdir(parents=True)
    (into / "lib").mkdir()
    shutil.copy2(os.path.realpath(base / "bin" / VERSION), into / "bin" / VERSION)
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        name = sysconfig.get_config_var("INSTSONAME")
        shutil.copy2(Path(sysconfig.get_config_var("LIBDIR"), name), into / "lib" / name)

    def ignore(folder: str, names: list[str]) -> list[str]:
        top = folder == str(base / "lib" / VERSION)
        return [n for n in names if top and (n in LEFT_OUT or n.startswith("config-"))]

    shutil.copytree(base / "lib" / VERSION, into / "lib" / VERSION, ignore=ignore, symlinks=True)
    return into / "bin" / VERSION


@pytest.fixture(scope="module")
def open_python() -> Iterator[OpenPython]:
    folder = Path(tempfile.mkdtemp(prefix="rio-seal-python-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        python = copy_of_python(folder / "open" / "python")
        venv_python = python_with(folder / "venv", base=str(python))
        base = python.parent.parent
        yield OpenPython(folder / "open", base, base / "lib" / VERSION, venv_python)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def opened(open_python: OpenPython) -> OpenPython:
    open_python.reopen()
    return open_python


def cell_probe(python: OpenPython) -> str:
    """A Cell that writes into the interpreter's standard library and the folders above."""
    stdlib, base = python.stdlib, python.base
    return (
        attempt("stdlib", f"echo '# a Cell was here' >> {stdlib}/os.py")
        + attempt("module", f"touch {stdlib}/sitecustomize.py && rm {stdlib}/sitecustomize.py")
        + attempt("above", f"touch {stdlib.parent}/{ZIP} && rm {stdlib.parent}/{ZIP}")
        + attempt("replaced", f"mv {base} {base}.moved && mv {base}.moved {base}")
    )


def open_entries(python: OpenPython) -> list[str]:
    """What others may write under the open folder (links aside)."""
    return [path for path in entries(python.open) if os.lstat(path).st_mode & stat.S_IWOTH]


def entries(top: Path) -> list[str]:
    """``top`` and everything under it, links aside."""
    found = [str(top)]
    for folder, dirs, files in os.walk(top):
        found += [os.path.join(folder, name) for name in [*dirs, *files]]
    return [path for path in found if not os.path.islink(path)]


WRITTEN = ["stdlib=written", "module=written", "above=written", "replaced=written"]
REFUSED = ["stdlib=refused", "module=refused", "above=refused", "replaced=refused"]


def closed_line(python: OpenPython, user: str, count: int) -> tuple[str, str, str]:
    """The start, middle and end of the line that names what was closed."""
    return (
        f"closed {count} entries (",
        f"of its own interpreter and packages that the Cell user {user} could write: "
        f"{python.open} (was 0777), {python.base} (was 0777), {python.base}/bin (was 0777), ",
        f"more under {python.base}/lib",
    )


@pytest.mark.slow
def test_an_owner_closes_its_open_interpreter_before_the_first_cell_and_says_so(
    place: Path, cell_user: str, opened: OpenPython
) -> None:
    sess = CliSession.create(place / "s")
    probe = cell_probe(opened)
    rio = [str(opened.venv_python), "-m", "rio_ci", "work", str(sess.db)]
    assert as_user(CellUser.ensure(cell_user), probe) == WRITTEN  # the control
    count = len(open_entries(opened))

    shared = subprocess.run(rio, cwd=place, env=opened.environment(), capture_output=True)

    # Cells sharing the harness's user: nothing to close them out of, and nothing changed
    assert shared.returncode == 0, shared.stderr
    assert b"closed" not in shared.stderr and len(open_entries(opened)) == count
    sess.propose(cmd_cell("sh", "-c", probe))

    done = subprocess.run(
        [*rio, "--cell-user", cell_user],
        cwd=place,
        env=opened.environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert sess.json("output", str(sess.db), "1")["text"].split() == REFUSED
    (line,) = [line for line in done.stderr.splitlines() if "closed" in line]
    start, middle, end = closed_line(opened, cell_user, count)
    assert line.startswith(f"rio-ci: {start}") and middle in line and line.endswith(end), line
    assert open_entries(opened) == []
    assert mode(opened.open) == 0o775 and mode(opened.stdlib / "os.py") == 0o775


@pytest.mark.slow
@pytest.mark.people(alice="write")
def test_the_action_warns_in_its_log_and_step_summary_and_finish_finds_it_closed(
    place: Path, gh: FakeGitHub, cell_user: str, opened: OpenPython
) -> None:
    repo = Repository(place, gh)
    repo.command = [str(opened.venv_python), "-m", "rio_ci"]
    repo.set_script(script([add(cmd_cell("sh", "-c", cell_probe(opened)))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env.update(opened.environment(RIO_CELL_USER=cell_user))
    count = len(open_entries(opened))

    run = repo.step(job)
    finish = repo.step(job, "finish")

    assert run.code == 0 and finish.code == 0, (run.stderr, finish.stderr)
    start, middle, end = closed_line(opened, cell_user, count)
    (warning,) = [line for line in job.logs.splitlines() if "closed" in line]
    assert warning.startswith(f"::warning::rio-ci: {start}") and middle in warning
    assert warning.endswith(end) and warning in run.stderr  # the run step's, once
    (summary,) = [line for line in job.summary.splitlines() if "closed" in line]
    assert summary.startswith(f"> **Warning** (rio-ci): {start}") and summary.endswith(end)
    text = "".join(
        e["text"]
        for e in repo.events(job)
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout" and "text" in e
    )
    assert text.split() == REFUSED
    assert open_entries(opened) == []
