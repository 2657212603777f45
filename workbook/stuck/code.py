"""Whose code a file is (the harness's, Python's library, the submission's) and how a
line of it is quoted.  Depends on file paths only: the same answer for the whole process."""
from __future__ import annotations

import functools
import linecache
import os
import sysconfig
import threading

_WORKBOOK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The harness: the ``workbook`` package and the acceptance sets in ``tests``.
HARNESS_DIRS: tuple[str, ...] = (os.path.join(os.path.dirname(_WORKBOOK), "tests") + os.sep,
                                 _WORKBOOK + os.sep)
#: The bounded waits and the detector themselves (frames skipped when naming a caller).
KIT_DIRS: tuple[str, ...] = (os.path.join(_WORKBOOK, "testkit") + os.sep,
                             os.path.join(_WORKBOOK, "stuck") + os.sep)
#: Python's own library and the installed packages: never a submission's code.
LIBRARY = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                         "platlib")})
_STDLIB = os.path.dirname(os.path.abspath(threading.__file__)) + os.sep


@functools.lru_cache(maxsize=4096)
def real(filename: str) -> str:
    """``os.path.realpath(filename)``, once per file name: a look asks it for every frame of
    every thread, and each answer costs a system call per directory of the path."""
    return os.path.realpath(filename)


def is_harness(filename: str) -> bool:
    return real(filename).startswith(HARNESS_DIRS)


def is_kit(filename: str) -> bool:
    return filename.startswith(KIT_DIRS)


def is_stdlib(filename: str) -> bool:
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def is_trusted(filename: str) -> bool:
    """Whether code from ``filename`` is Python's library (an installed package or a frozen
    module too) or this harness: anything else, code without a file included (``exec``'d
    text, ``<string>``), may be the submission's."""
    return filename.startswith(LIBRARY) or filename.startswith("<frozen ") \
        or is_harness(filename)


@functools.lru_cache(maxsize=None)
def is_submission_code(filename: str) -> bool:
    """Whether code from ``filename`` is the submission's own (its file or helper modules):
    not trusted (``is_trusted``), and not code without a file (``<string>``)."""
    return not (filename.startswith("<") or is_trusted(filename))


def shown(filename: str) -> str:
    """``filename`` relative to the working directory when it is below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def source_line(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno).strip()


def code_only(filename: str, lineno: int) -> str:
    """A source line without its trailing comment (for quoting)."""
    text = source_line(filename, lineno)
    if "#" in text and text.count("'") % 2 == 0 and text.count('"') % 2 == 0:
        text = text.split("#", 1)[0].rstrip()
    return text
