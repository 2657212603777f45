"""The harness's own modules, compiled once so that no check's process compiles them again.

A check's process writes no bytecode (``PYTHONDONTWRITEBYTECODE``): a learner file must never
be run from a ``.pyc`` older than its last save, and a ``.pyc`` checked by timestamp can be (an
edit of the same size within the same second).  Without bytecode, though, every check compiled
the harness's modules again (0.03-0.05 s of CPU, a twelfth to a twentieth of a check's
fixed cost, measured on the skeleton).

So the process that starts checks compiles the harness's modules here, into the usual
``__pycache__`` folders, as *checked-hash* ``.pyc`` files (PEP 552): an import reads the
source, compares its hash with the one stored, and compiles in memory when they differ.  A
stale harness ``.pyc`` is never run, however an edit was timed; the learner's files get none.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
from pathlib import Path

#: A checked-hash ``.pyc``'s flags (PEP 552: bit 0 hash-based, bit 1 check the source).
CHECKED_HASH = (0b11).to_bytes(4, "little")


def compiled(rel: str, source: bytes) -> bytes | None:
    """The checked-hash ``.pyc`` of ``source`` (the file ``rel``) for this interpreter.
    None for what pytest rewrites itself (tests, conftest) or what does not compile."""
    name = Path(rel).name
    if not name.endswith(".py") or name.startswith("test_") or name == "conftest.py":
        return None
    try:
        code = compile(source, rel, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    header = importlib.util.MAGIC_NUMBER + CHECKED_HASH + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def _current(pyc: Path, source: bytes) -> bool:
    """Whether ``pyc`` is this interpreter's checked-hash bytecode of ``source``."""
    try:
        with pyc.open("rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return head == (importlib.util.MAGIC_NUMBER + CHECKED_HASH
                    + importlib.util.source_hash(source))


def warm(root: Path, files: list[Path]) -> int:
    """Write the missing or outdated bytecode of ``files`` (relative to ``root``); how many
    were written.  Quietly does less where the tree is read-only: bytecode only saves time.
    Another process warming the same tree at once is harmless (each file is replaced whole)."""
    written = 0
    for rel in files:
        try:
            source = (root / rel).read_bytes()
        except OSError:
            continue
        target = Path(importlib.util.cache_from_source(str(root / rel)))
        if _current(target, source):
            continue
        pyc = compiled(str(rel), source)
        if pyc is None:
            continue
        try:
            target.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".warm-")
            with os.fdopen(fd, "wb") as f:
                f.write(pyc)
            os.replace(tmp, target)
            written += 1
        except OSError:
            continue
    return written


_warmed: set[tuple[str, str]] = set()


def warm_once(root: Path, python: str) -> None:
    """``warm`` for a check run by ``python``: once per process and tree, and only when
    ``python`` is this interpreter (another's bytecode has another name and format)."""
    key = (str(root), python)
    if key in _warmed or os.path.realpath(python) != os.path.realpath(sys.executable):
        return
    _warmed.add(key)
    warm(root, harness_files(root))


def harness_files(root: Path) -> list[Path]:
    """The harness's modules under ``root`` (``workbook/`` and ``tests/``), relative to it."""
    return sorted(path.relative_to(root)
                  for folder in ("workbook", "tests") for path in (root / folder).rglob("*.py")
                  if "__pycache__" not in path.parts)
