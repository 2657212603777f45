"""What a graded run sees of the grader's files: the ``Harness`` (the files that judge one
problem, read and compiled once per batch) and the ``Stage`` (a temporary folder holding the
harness, one problem's tests and one submission).  Never ``solutions/``.
"""
from __future__ import annotations

import ast
import atexit
import hashlib
import importlib.util
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from workbook import ROOT, bytecode, manifest
from workbook.grading.sandbox.uids import UID_BASE

#: Staging directories are named ``workbook-grade-<grader pid>-<random>``.
STAGE_PREFIX = "workbook-grade-"
#: The stage's folder of the few ``/etc`` files a run sees in both namespace modes.
ETC = "sandbox-etc"
ETC_FILES = {
    "hosts": b"127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
    "nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
    "passwd": b"root:x:0:0::/:/usr/sbin/nologin\nlearner:x:%d:%d::/tmp:/usr/sbin/nologin\n"
              % ((UID_BASE,) * 2),
    "group": b"root:x:0:\nlearner:x:%d:\n" % UID_BASE}


def staged_files(problems: list[manifest.Problem]) -> list[Path]:
    """What judges ``problems``, relative to ``ROOT``: the ``workbook`` package's modules,
    those problems' manifests and acceptance sets, and ``tests/``'s own modules.  Never
    ``solutions/``, ``mine/``, hints, the book or another problem's tests.  The one list
    both a graded run's stage and the Gradescope bundle are made of."""
    package = ROOT / "workbook"
    files = [q for q in package.rglob("*.py") if "__pycache__" not in q.parts]
    files += [package / "problems" / f"{p.id}.toml" for p in problems]
    files += list((ROOT / "tests").glob("*.py"))
    for p in problems:
        files += [q for q in p.tests_dir.rglob("*")
                  if q.is_file() and "__pycache__" not in q.parts]
    return sorted({q.relative_to(ROOT) for q in files})


def judging_imports(files: dict[str, bytes], problem: manifest.Problem) -> list[str]:
    """The library modules that judge ``problem``: every module named by an import statement
    (at the top or inside a function) of its acceptance set and of the harness modules it
    reaches that way.  The run imports and guards them before the learner file
    (``reporter._library_modules``)."""
    modules = {rel[:-3].replace("/", ".").removesuffix(".__init__"): rel
               for rel in files if rel.endswith(".py")}
    pending = [name for name in modules if name.startswith(f"tests.{problem.id}")]
    pending += ["workbook.plugin", "workbook.records", "workbook.testkit"]
    seen, library = set(pending), set()
    while pending:
        name = pending.pop()
        package = name if modules[name].endswith("__init__.py") else name.rpartition(".")[0]
        try:
            tree = ast.parse(files[modules[name]])
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package this module is in
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 \
                        else package
                    base = f"{parent}.{base}" if base else parent
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target in modules and target not in seen:
                    seen.add(target)
                    pending.append(target)
                elif target.split(".")[0] not in ("workbook", "tests", "__future__") \
                        and target not in modules and (isinstance(node, ast.Import)
                                                       or target == targets[0]):
                    library.add(target)
    return sorted(library)


def _bytecode(rel: str, source: bytes) -> tuple[str, bytes] | None:
    """``rel``'s checked-hash ``.pyc`` (``bytecode.compiled``: valid whatever the staged
    file's mtime, and only while its bytes are the ones compiled) and where it goes, so that
    no run compiles the harness again."""
    code = bytecode.compiled(rel, source)
    return None if code is None else (importlib.util.cache_from_source(rel), code)


@dataclass(frozen=True)
class Harness:
    """The files that judge one problem, read once: every run of a batch uses the same bytes,
    even if someone edits the repository meanwhile (and their bytecode, compiled once)."""
    files: tuple[tuple[str, bytes], ...]
    bytecode: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def snapshot(cls, problem: manifest.Problem) -> "Harness":
        files = tuple((str(rel), (ROOT / rel).read_bytes()) for rel in staged_files([problem]))
        imports = " ".join(judging_imports(dict(files), problem)).encode()
        return cls(files + (("judging-imports.txt", imports),),
                   tuple(filter(None, (_bytecode(rel, data) for rel, data in files))))

    @property
    def fingerprint(self) -> str:
        """Changes whenever anything that judges this problem changes."""
        digest = hashlib.sha256()
        for rel, data in self.files:
            digest.update(rel.encode() + b"\0" + data + b"\0")
        return digest.hexdigest()[:16]

    def tree(self) -> Path:
        """These files (and the few every stage holds) written once to a folder of the
        grader's alone, read-only to everyone else; each stage hard-links them from there
        (a link costs a fraction of a write: staging a run went from about 110 to about
        15 ms of CPU).  Removed when the grader exits (``remove_stale_stages`` if killed)."""
        with _TREES_LOCK:
            tree = _TREES.get(self)
            if tree is None:
                tree = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-harness-"))
                atexit.register(shutil.rmtree, tree, ignore_errors=True)
                shared = {**dict(self.files + self.bytecode), "pytest.ini": b"[pytest]\n",
                          **{f"{ETC}/{name}": data for name, data in ETC_FILES.items()}}
                for rel, data in shared.items():
                    path = tree / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    os.chmod(path, 0o644)
                _TREES[self] = tree = tree.resolve()
            return tree


#: Each harness's read-only copy on disk (``Harness.tree``), made on first use.
_TREES: dict[Harness, Path] = {}
_TREES_LOCK = threading.Lock()


def remove_stale_stages() -> None:
    """Delete staging directories left by graders that no longer run (killed with SIGKILL,
    they could not clean up)."""
    for path in Path(tempfile.gettempdir()).glob(STAGE_PREFIX + "*"):
        pid = path.name[len(STAGE_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # no error: its grader is alive (this one, say)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


class Stage:
    """A temporary directory holding the harness, one problem's tests and one submission:
    the learner file as ``submission/<module>.py`` and its helper modules beside it (the
    end of the run's ``sys.path``, so they never shadow the harness or the stdlib).

    ``solutions/`` is never copied.  Everything is owned by the grader and read-only to the
    run; ``work/`` is the run's only writable place (its cwd, HOME and TMPDIR).
    """

    def __init__(self, harness: Harness, module: str, source: bytes, uid: int | None,
                 helpers: dict[str, bytes] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-")).resolve()
        self.target = self.dir / "submission" / f"{module}.py"
        self.work = self.dir / "work"
        try:
            tree = harness.tree()
            # A run under its own uid cannot write the grader's files, so it gets the shared
            # ones; one that runs as the grader (not root) gets copies of its own.
            place = os.link if uid is not None else shutil.copyfile
            for here, folders, names in os.walk(tree):
                inside = self.dir / os.path.relpath(here, tree)
                for folder in folders:
                    (inside / folder).mkdir()
                    os.chmod(inside / folder, 0o755)  # whatever the umask
                for name in names:
                    place(os.path.join(here, name), inside / name)
            own = {**{rel: data for rel, data in (helpers or {}).items()}, f"{module}.py": source}
            for rel, data in own.items():
                path = self.dir / "submission" / rel
                path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                path.write_bytes(data)
                os.chmod(path, 0o644)
            for path in [self.dir / "submission", *(self.dir / "submission").rglob("*")]:
                if path.is_dir():
                    os.chmod(path, 0o755)  # whatever the umask
            self.work.mkdir()
            if uid is not None:
                # Only this run's uid may enter: another submission graded at the same time
                # cannot read this one.
                os.chown(self.dir, 0, uid)
                os.chmod(self.dir, 0o750)
                os.chown(self.work, uid, uid)
                os.chmod(self.work, 0o700)
            else:
                os.chmod(self.dir, 0o700)
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> "Stage":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


