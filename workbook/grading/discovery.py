"""Finding submissions in an instructor's folder.

Each entry of the folder is one submission: a folder holding any of the learner files (found
at any depth, the shallowest wins) with, optionally, helper modules beside each (``*.py``
files and packages in the same folder, importable by that file only), or a lone ``.py`` file
whose name contains the module name.  Symbolic links are refused, never followed.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbook import manifest

#: A learner file (or helper) larger than this is refused without being run.
MAX_FILE = 1 << 20
#: Helper modules beside a learner file: at most this many files, this many bytes in all.
MAX_HELPERS, MAX_HELPER_BYTES = 64, 4 << 20
#: How deep inside a submission learner files and helper packages are looked for.
MAX_DEPTH = 16
#: Folders never searched for learner files inside a submission.
SKIP_DIRS = {"__pycache__", "__MACOSX", "node_modules", ".git", ".venv"}


@dataclass
class Submission:
    name: str
    path: Path
    files: dict[str, Path] = field(default_factory=dict)    # problem id -> learner file
    refused: dict[str, str] = field(default_factory=dict)   # problem id -> why not run
    extra_paths: list[Path] = field(default_factory=list)   # more lone files of one student
    entry: Path | None = None   # the class folder's entry it came from (a zip: the archive)

    def add(self, problem_id: str, path: Path) -> None:
        """``path`` as this submission's file for ``problem_id``, or refused and why."""
        refusal = _refusal(path)
        if refusal:
            self.refused[problem_id] = refusal
        else:
            self.files[problem_id] = path

    @staticmethod
    def read(path: Path) -> bytes:
        """The file's bytes, refusing to follow a link, or to read anything but a regular
        file, swapped in since discovery (a FIFO would block the batch for ever): OSError."""
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file any more", str(path))
            return f.read(MAX_FILE + 1)[:MAX_FILE]

    def helpers(self, problem_id: str) -> dict[str, bytes]:
        """The helper modules beside this problem's learner file (none for a lone file):
        ``*.py`` files and packages of its folder, relative path -> bytes."""
        path = self.files[problem_id]
        if path == self.path or path in self.extra_paths:
            return {}
        found: dict[str, bytes] = {}
        total = 0
        folder = path.parent
        for here, files in _walk(folder, packages_only=True):
            for name in files:
                candidate = here / name
                if not name.endswith(".py") or candidate == path or _refusal(candidate):
                    continue
                data = self.read(candidate)
                total += len(data)
                if len(found) >= MAX_HELPERS or total > MAX_HELPER_BYTES:
                    return found
                found[str(candidate.relative_to(folder))] = data
        return found

    def fingerprint(self, problem_id: str) -> str:
        """Changes whenever what would be graded for ``problem_id`` changes."""
        if problem_id in self.refused:
            return "refused:" + self.refused[problem_id]
        if problem_id not in self.files:
            return "missing"
        try:
            digest = hashlib.sha256(self.read(self.files[problem_id]))
            for rel, data in sorted(self.helpers(problem_id).items()):
                digest.update(b"\0" + os.fsencode(rel) + b"\0" + data)
        except OSError as exc:  # graded as an error row (``judging.grade_pair``)
            return f"unreadable:{exc.strerror}"
        return digest.hexdigest()[:16]


def discover(root: Path, problems: list[manifest.Problem], *, single: bool = False,
             unpack_to: Path | None = None,
             warn: Callable[[str], None] | None = None) -> list[Submission]:
    """The submissions in ``root``: each folder (or ``.py`` file, or ``.zip`` archive,
    unpacked into ``unpack_to``) is one; ``single``: root itself is one.  Symbolic links are
    never followed.  Every entry that is a submission gets a row under a name of its own
    (``unique_names``); ``warn`` is told of each name that had to change, and of names that
    differ only in case."""
    if single:
        return [_folder_submission(root.name or "submission", root, problems)]
    found: list[Submission] = []
    flat: dict[str, Submission] = {}  # lone files by their short name: one student's files
    for index, entry in enumerate(sorted(root.iterdir())):
        if entry.name.startswith(".") or entry.name in SKIP_DIRS:
            continue
        if entry.suffix.lower() == ".zip" and entry.is_file() and not entry.is_symlink() \
                and unpack_to is not None:
            try:
                folder = unpack(entry, unpack_to / f"{index}-{entry.stem}")
            except Exception as exc:  # noqa: BLE001 - whatever a student's archive holds:
                # zipfile also raises RuntimeError (encrypted), NotImplementedError (an
                # unknown compression), zlib.error and EOFError (damaged data)
                sub = Submission(entry.stem, entry)
                sub.refused = {p.id: f"the archive cannot be unpacked ({exc})" for p in problems}
            else:
                sub = _folder_submission(entry.stem, folder, problems)
        elif entry.is_symlink():
            sub = Submission(entry.name, entry)
            sub.refused = {p.id: "a symbolic link (refused)" for p in problems}
        elif entry.is_dir():
            sub = _folder_submission(entry.name, entry, problems)
        elif entry.is_file() and entry.suffix == ".py":
            sub = _file_submission(entry, problems)
            if sub is None:
                continue
            other = flat.get(sub.name)
            if other is not None and not (set(other.files) | set(other.refused)) & (
                    set(sub.files) | set(sub.refused)):
                # An LMS's flat files (``doe_jane_12345_p01_output_sink.py``, ``…_p03_…``):
                # one student, one row, each file for its own problem.
                other.files.update(sub.files)
                other.refused.update(sub.refused)
                other.extra_paths.append(entry)
                continue
            flat.setdefault(sub.name, sub)
        else:
            continue
        sub.entry = entry
        found.append(sub)
    for text in unique_names(found):
        if warn is not None:
            warn(text)
    return found


def unique_names(subs: list[Submission]) -> list[str]:
    """Give every submission a name no other has, and say what changed (one sentence each).

    A folder is named by itself; a lone file by its name minus the module, a zip by its name
    minus ``.zip``: short names that can clash with each other and with a folder.  Where
    several want one name, a folder keeps it (its name is its entry's) and each of the others
    takes its entry's full name (``p01_output_sink_zed.py``, ``zed.zip``): the same names
    whatever order the entries are found in, and none replaces another.  Entries of one folder
    have distinct names, so this leaves a clash only in contrived cases (a zip named like
    another lone file's full name); those get a short hash of their entry's name appended."""
    notes: list[str] = []
    by_name: dict[str, list[Submission]] = {}
    for sub in subs:
        by_name.setdefault(sub.name, []).append(sub)
    for name, group in by_name.items():
        if len(group) < 2:
            continue
        for sub in group:
            if sub.entry is not None and sub.name != sub.entry.name:
                sub.name = sub.entry.name
        notes.append(f"{len(group)} entries of the class folder would be named {name!r} ("
                     + ", ".join(sorted(s.entry.name for s in group if s.entry)) + "): each "
                     f"gets a row, named " + ", ".join(repr(s.name) for s in group))
    taken: dict[str, Submission] = {}
    for sub in subs:  # still the same name (contrived): a hash of the entry's name tells
        if sub.name in taken:
            entry = (sub.entry or sub.path).name
            digest = hashlib.sha256(os.fsencode(entry)).hexdigest()[:8]
            notes.append(f"{entry!r} would be named {sub.name!r} like another entry: "
                         f"named {sub.name + '~' + digest!r}")
            sub.name = f"{sub.name}~{digest}"
        taken[sub.name] = sub
    by_fold: dict[str, list[str]] = {}
    for sub in subs:
        by_fold.setdefault(unicodedata.normalize("NFC", sub.name).casefold(), []).append(
            sub.name)
    notes += [f"the names {', '.join(map(repr, sorted(names)))} differ only in case or "
              "Unicode form: separate rows, easy to confuse (and one folder on a "
              "case-insensitive disk: the exports keep them apart)"
              for names in by_fold.values() if len(names) > 1]
    return notes


#: An archive's limits: members, bytes unpacked in all.
MAX_MEMBERS, MAX_UNPACKED = 2000, 32 << 20


def unpack(archive: Path, into: Path) -> Path:
    """Unpack a submission's ``.zip`` into ``into`` (made here): regular files only, no path
    that leaves the folder, no links, ``__MACOSX`` and hidden entries left out, at most
    ``MAX_MEMBERS`` members and ``MAX_UNPACKED`` bytes."""
    into.mkdir(parents=True)
    total = 0
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise ValueError(f"more than {MAX_MEMBERS} entries")
        for info in members:
            parts = Path(info.filename.replace("\\", "/")).parts
            if info.is_dir() or not parts or any(
                    part in ("..", "") or part.startswith(".") or part in SKIP_DIRS
                    for part in parts) or info.filename.startswith("/"):
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                continue
            total += info.file_size
            if total > MAX_UNPACKED:
                raise ValueError(f"more than {MAX_UNPACKED >> 20} MiB unpacked")
            target = into.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "xb") as dst:
                dst.write(src.read(MAX_FILE + 1))
    return into


def _folder_submission(name: str, folder: Path, problems: list[manifest.Problem]) -> Submission:
    sub = Submission(name, folder)
    for problem in problems:
        path = _find(folder, problem.learner_file.name)
        if path is not None:
            sub.add(problem.id, path)
    return sub


def _file_submission(path: Path, problems: list[manifest.Problem]) -> Submission | None:
    """A lone ``.py`` file: for the one selected problem, or the problem whose module (or
    id) its name contains.  Its name, minus that, names the submission."""
    matches = [p for p in problems if p.module in path.stem] or \
              [p for p in problems if path.stem.startswith(p.id)]
    if not matches and len(problems) == 1 and not any(
            q.module in path.stem or path.stem.startswith(q.id)
            for q in manifest.problems().values()):
        matches = problems  # named after no problem at all: the one being graded
    if len(matches) != 1:
        return None
    problem = matches[0]
    name = path.stem.replace(problem.module, "").strip("_-. ") or path.stem
    sub = Submission(name, path)
    sub.add(problem.id, path)
    return sub


def _walk(folder: Path, packages_only: bool = False):
    """``(folder, sorted file names)`` for ``folder`` and its subfolders, shallowest first, at
    most ``MAX_DEPTH`` deep (links not followed, hidden ones and ``SKIP_DIRS`` left out;
    ``packages_only``: only packages).  Iterative, and a folder that cannot be read is
    skipped: no nesting or unreadable folder stops a batch."""
    pending = [(folder, 0)]
    while pending:
        here, depth = pending.pop(0)
        try:
            with os.scandir(here) as entries:
                listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except OSError:
            continue
        # Everything but folders (links too: the caller refuses them with a reason).
        files = sorted(name for name, is_dir in listed if not is_dir)
        yield here, files
        if depth >= MAX_DEPTH:
            continue
        for name in sorted(name for name, is_dir in listed if is_dir):
            if name.startswith(".") or name in SKIP_DIRS:
                continue
            if packages_only and not os.path.isfile(os.path.join(here, name, "__init__.py")):
                continue
            pending.append((here / name, depth + 1))


def _find(folder: Path, filename: str) -> Path | None:
    """The shallowest file called ``filename`` under ``folder``."""
    found = [here / filename for here, files in _walk(folder) if filename in files]
    return min(found, key=lambda path: (len(path.parts), str(path)), default=None)


def _refusal(path: Path) -> str | None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link (refused)"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > MAX_FILE:
        return f"too large ({info.st_size} bytes; the limit is {MAX_FILE})"
    if info.st_nlink > 1:
        # A hard link can name any file of the same filesystem: one the grader (root) may
        # read and the submission's author may not.  Only a link to a file of the folder's
        # owner that anyone may read is taken.
        try:
            folder_owner = os.lstat(path.parent).st_uid
        except OSError:
            folder_owner = -1
        if info.st_uid != folder_owner or not info.st_mode & stat.S_IROTH:
            return "a hard link to a file of another user or not readable by all (refused)"
    return None
