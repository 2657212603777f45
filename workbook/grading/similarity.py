"""Which submissions are alike: copydetect's fingerprints (MOSS-style winnowing over its
tokenizer, which replaces every name, drops comments, layout and docstrings) of every file of
each submission, a file with a syntax error included.

What is fingerprinted is what Python runs: each file decoded as Python decodes it (its
encoding declaration or BOM obeyed; a file Python cannot decode is compared as UTF-8 with
the bad bytes replaced, and the report says so), then normalised in linear time -- blank
lines and trailing whitespace outside strings left out (copydetect drops them anyway; its
lexer is quadratic in a run of blank lines) -- and cut at ``MAX_TEXT`` characters a file,
with a note.  Each submission's fingerprint is made in a child process held to ``BUDGET``
seconds of CPU, and the whole report to ``TOTAL_BUDGET``: a file that is slow to fingerprint
is left out with a note, never the report of the class.

Per problem the report has groups of submissions whose files are the same after that
normalising, and pairs of different ones at least ``threshold`` % alike, where the percent is
copydetect's own measure (``compare_files``: the share of one's fingerprinted tokens found in
the other; the larger of the two shares).

Cheap to run again and out of the runs' way (``Background``): each distinct text is
fingerprinted once, by its SHA-256, and kept in a cache file beside the gradebook, so a new
batch over the same class fingerprints only what changed; two fingerprints are compared from
their positions directly (the same number ``compare_files`` gives, which the selftest checks,
without building an array per shared fingerprint); and a batch computes all this in a process
of its own at the lowest priority while the runs go on, raised to normal once they are done.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import functools
import hashlib
import importlib.util
import io
import itertools
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import tokenize
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

#: copydetect's fingerprint: k-grams of this many tokens, winnowed over this many.
K, WINDOW = 25, 1
#: A file's normalised text is fingerprinted up to this many characters (the rest: a note).
#: The typical class's largest file has 43 000.
MAX_TEXT = 200_000
#: CPU seconds one submission's files may take to fingerprint (the typical: 0.1 s).
BUDGET = 10
#: CPU seconds all fingerprinting of one report may take; what is left after it: a note.
TOTAL_BUDGET = 240
#: The cache file's format (a different one is ignored and rewritten).  copydetect hashes
#: k-grams with ``hash()``: the cache is kept only by a process whose string hashes are not
#: randomised (``Background`` runs it with PYTHONHASHSEED=0), on the same hash algorithm.
FORMAT = (f"workbook-fingerprints/2 k={K} w={WINDOW} max={MAX_TEXT} budget={BUDGET} "
          f"hash={sys.hash_info.algorithm}")
#: Seconds the background similarity may take after the last run before it is stopped: it
#: then reports what it compared so far (``GRACE`` seconds more), the rest as notes.
TIMEOUT, GRACE = 600, 30


class Source(NamedTuple):
    """One file of a submission as Python reads it."""
    file: str          # its path in the submission (the learner file's own name first)
    text: str          # decoded as Python decodes it, newlines as "\n"
    undecodable: str   # why Python cannot decode it ("" when it can): text is UTF-8, replaced


def source_text(data: bytes) -> tuple[str, str]:
    """``data`` decoded the way Python decodes a source file (the encoding declaration, a BOM,
    else UTF-8; universal newlines), and "", or, when Python cannot decode it, the bytes as
    UTF-8 with the undecodable ones replaced and Python's own words for why."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text, why = data.decode(encoding), ""
    except (SyntaxError, LookupError, UnicodeError):
        text, why = data.decode("utf-8", "replace"), ""
        try:  # Python's parser decides (it lets bytes that are not UTF-8 pass in comments)
            compile(data, "<submission>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as exc:
            why = exc.msg
        except Exception as exc:  # noqa: BLE001 - nested too deep, ...: no verdict on it
            why = f"{type(exc).__name__}: {exc}"
    return text.replace("\r\n", "\n").replace("\r", "\n"), why


def normalised(text: str) -> str:
    """``text`` without its blank lines and trailing whitespace, except inside a string (a
    line that Python's tokenizer finds within a multi-line token is kept as it is).  Linear
    in the text; a file the tokenizer stops on is normalised line by line after that."""
    lines = text.split("\n")
    inside: set[int] = set()  # 0-based lines that end inside a multi-line token
    with contextlib.suppress(tokenize.TokenError, SyntaxError, ValueError):
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.end[0] > tok.start[0]:
                inside.update(range(tok.start[0] - 1, tok.end[0] - 1))
    return "\n".join(line if i in inside else line.rstrip(" \t\f")
                     for i, line in enumerate(lines)
                     if i in inside or line.strip(" \t\f")) + "\n"


def prepared(sources: list[Source]) -> tuple[str, list[str]]:
    """The text fingerprinted for one submission's files, and what was cut from it."""
    texts, cut = [], []
    for source in sources:
        text = normalised(source.text)
        if len(text) > MAX_TEXT:
            cut.append(f"{source.file}: only its first {MAX_TEXT} of {len(text)} characters "
                       "(blank lines and trailing spaces left out) were compared")
            text = text[:text.rfind("\n", 0, MAX_TEXT) + 1 or MAX_TEXT]
        texts.append(text)
    return "\n".join(texts), cut


@dataclass(frozen=True, eq=False)
class Print:
    """One text's fingerprint: the hash of each fingerprinted k-gram, by position."""
    canonical: str          # SHA-256 of the normalised tokens: equal when alike
    spots: "np.ndarray"     # positions (token offsets) of the fingerprints, ascending
    hashes: "np.ndarray"    # the fingerprint at each of those positions
    coverage: int           # tokens the fingerprints cover (copydetect's figure)
    notes: tuple[str, ...] = ()  # what of the files was left out (``prepared``)

    @classmethod
    def of_sources(cls, sources: list[Source]) -> "Print":
        """The fingerprint of one submission's files: ``prepared``, then ``of``."""
        text, cut = prepared(sources)
        found = cls.of(text)
        return cls(found.canonical, found.spots, found.hashes, found.coverage, tuple(cut))

    @classmethod
    def of(cls, text: str) -> "Print":
        import numpy as np
        from copydetect import CodeFingerprint
        from copydetect.utils import filter_code
        try:
            found = CodeFingerprint("submission.py", K, WINDOW, language="python",
                                    fp=io.StringIO(text))
        except Exception:  # noqa: BLE001 - too short to fingerprint: alike only if identical
            filtered, _ = filter_code(text, "submission.py", "python")
            empty = np.zeros(0, dtype=np.int64)
            return cls(hashlib.sha256(filtered.encode()).hexdigest(), empty, empty, 0)
        pairs = sorted((int(i), int(h)) for h, spots in found.hash_idx.items() for i in spots)
        return cls(hashlib.sha256(found.filtered_code.encode()).hexdigest(),
                   np.array([i for i, _ in pairs], dtype=np.int64),
                   np.array([h for _, h in pairs], dtype=np.int64),
                   int(found.token_coverage) if found.filtered_code else 0)

    @functools.cached_property
    def distinct(self) -> "np.ndarray":
        """Its fingerprints, each once, ascending."""
        import numpy as np
        return np.unique(self.hashes)

    def found_in(self, common: "np.ndarray") -> "np.ndarray":
        """The positions of its fingerprints that are among ``common`` (ascending)."""
        import numpy as np
        at = np.minimum(np.searchsorted(common, self.hashes), len(common) - 1)
        return self.spots[common[at] == self.hashes]

    def to_json(self) -> dict:
        return {"canonical": self.canonical, "coverage": self.coverage, "notes": self.notes,
                "spots": base64.b64encode(self.spots.astype("<i4").tobytes()).decode(),
                "hashes": base64.b64encode(self.hashes.astype("<i8").tobytes()).decode()}

    @classmethod
    def from_json(cls, data: dict) -> "Print":
        import numpy as np
        return cls(data["canonical"],
                   np.frombuffer(base64.b64decode(data["spots"]), "<i4").astype(np.int64),
                   np.frombuffer(base64.b64decode(data["hashes"]), "<i8").astype(np.int64),
                   int(data["coverage"]), tuple(data.get("notes", ())))


class OutOfTime(Exception):
    """The report's time is up (``TOTAL_BUDGET`` spent, or ``stop()`` called)."""


class _Stop:
    """Set by ``stop()`` (a SIGTERM handler) and read by ``fingerprint_each`` between items:
    the child at work is killed, what it had sent is kept, the rest is left out."""
    reason = ""
    child = 0  # the fingerprinting child at work, 0: none


def stop(reason: str) -> None:
    """Stop fingerprinting (safe in a signal handler): ``OutOfTime(reason)`` follows."""
    _Stop.reason = reason
    if _Stop.child:
        with contextlib.suppress(ProcessLookupError):
            os.kill(_Stop.child, signal.SIGKILL)


def fingerprint_each(items: list[tuple[str, list[Source]]], budget: int,
                     total: float) -> Iterator[tuple[str, "Print | str"]]:
    """``(key, Print.of_sources(sources))`` for each ``(key, sources)`` in turn, made in a
    child process held to ``budget`` seconds of CPU an item and ``total`` for all: measured
    by the kernel (RLIMIT_CPU), so a loaded machine does not count against them.  An item
    over its budget gets why instead, and a new child goes on with the rest; over the total,
    ``OutOfTime``.  One child does every item unless one is killed."""
    pending = list(items)
    spent = 0.0
    while pending and not _Stop.reason:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller
            os.close(r)
            _fingerprint_child(w, [sources for _, sources in pending], budget, total - spent)
        os.close(w)
        _Stop.child = pid
        if _Stop.reason:  # stopped while it was being started
            stop(_Stop.reason)
        bound, finished = b"", False
        try:
            with os.fdopen(r, "rb") as pipe:
                for line in pipe:  # "B" or "T" (the limit in force), then the fingerprint
                    if line in (b"B\n", b"T\n"):
                        bound = line
                        continue
                    key, _ = pending.pop(0)
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        yield key, Print.from_json(json.loads(line))
                        continue
                    yield key, "not compared: its fingerprint could not be read"
            finished = True
        finally:
            if not finished:  # the consumer stopped early: the child goes too
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            _Stop.child = 0
            spent += usage.ru_utime + usage.ru_stime
        if not pending or _Stop.reason:
            break
        if bound == b"T\n" or spent >= total:
            raise OutOfTime(f"the report had spent its {total:.0f} s of CPU")
        key, _ = pending.pop(0)  # the item it died on
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU,
                                                                     signal.SIGKILL)
        yield key, (f"not compared: its files took over {budget} s of CPU to fingerprint"
                    if killed else f"not compared: fingerprinting failed (status {status:#x})")
    if pending:
        raise OutOfTime(_Stop.reason)


def _fingerprint_child(w: int, items: list[list[Source]], budget: int, allowed: float):
    """Fingerprint ``items`` in order, one JSON line each on ``w``, each preceded by the
    limit in force ("B": its budget, "T": what is left of the total); exit."""
    status = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]  # stays: it could not be raised
        with os.fdopen(w, "wb") as out:
            for sources in items:
                used = time.process_time()
                limit = min(math.ceil(used + budget), max(1, math.floor(allowed)))
                out.write(b"B\n" if limit == math.ceil(used + budget) else b"T\n")
                out.flush()
                if limit <= used:
                    break
                resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))  # then SIGXCPU
                out.write(json.dumps(Print.of_sources(sources).to_json()).encode() + b"\n")
                out.flush()
        status = 0
    finally:
        os._exit(status)


def _covered(spots: "np.ndarray") -> int:
    """Tokens covered by k-grams starting at ``spots`` (ascending): copydetect's copied
    slices, runs of starts no more than k - 1 apart, each covering first .. last + k."""
    import numpy as np
    if not len(spots):
        return 0
    gaps = np.diff(spots) > K - 1
    starts = np.concatenate([spots[:1], spots[1:][gaps]])
    ends = np.concatenate([spots[:-1][gaps], spots[-1:]]) + K
    return int((ends - starts).sum())


def share(a: Print, b: Print) -> float:
    """How alike ``a`` and ``b`` are, 0..1: the larger of the two shares of fingerprinted
    tokens found in the other (``compare_files``'s similarities, the larger)."""
    import numpy as np
    common = np.intersect1d(a.distinct, b.distinct, assume_unique=True)
    if not len(common) or not a.coverage or not b.coverage:
        return 0.0
    return max(_covered(p.found_in(common)) / p.coverage for p in (a, b))


class Cache:
    """Fingerprints by the SHA-256 of their text, kept in a file of the grader's alone."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.prints: dict[str, Print] = {}
        self.failed: dict[str, str] = {}  # why there is no fingerprint
        self.used: set[str] = set()
        if path is not None:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                doc = json.loads(path.read_text("utf-8"))
                if doc.get("format") == FORMAT:
                    self.prints = {k: Print.from_json(v) for k, v in doc["prints"].items()}
                    self.failed = {k: str(v) for k, v in doc.get("failed", {}).items()}
        self.known = len(self.prints)

    @staticmethod
    def key(sources: list[Source]) -> str:
        return hashlib.sha256(json.dumps(sources).encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> "Print | str | None":
        """The fingerprint kept under ``key``, or why there is none, or None: not known."""
        self.used.add(key)
        return self.prints.get(key) or self.failed.get(key)

    def put(self, key: str, found: "Print | str") -> None:
        if isinstance(found, str):
            self.failed[key] = found
        else:
            self.prints[key] = found

    def save(self) -> None:
        """Keep what this batch used (a vanished submission's fingerprint goes)."""
        if self.path is None:
            return
        from workbook.grading.gradebook import atomic_write
        used = sorted(self.used)
        doc = {"format": FORMAT,
               "prints": {k: self.prints[k].to_json() for k in used if k in self.prints},
               "failed": {k: self.failed[k] for k in used if k in self.failed}}
        atomic_write(self.path, json.dumps(doc, separators=(",", ":")).encode())


def texts(submissions, problems) -> dict[str, dict[str, list[Source]]]:
    """Per problem, per submission: every file of it for that problem (the learner file, then
    each helper module in name order), decoded as Python decodes it (``source_text``)."""
    out: dict[str, dict[str, list[Source]]] = {}
    for p in problems:
        for sub in submissions:
            if p.id in sub.files:
                path = sub.files[p.id]
                try:
                    files = [(path.name, sub.read(path))]
                    files += sorted(sub.helpers(p.id).items())
                except OSError:  # swapped since discovery: its row says so, not compared
                    continue
                out.setdefault(p.id, {})[sub.name] = [Source(name, *source_text(data))
                                                      for name, data in files]
    return out


def report(by_problem: dict[str, dict[str, list[Source]]], threshold: float,
           cache: Cache | None = None, *, budget: int | None = None,
           total: float = TOTAL_BUDGET) -> dict:
    """The similarity report of ``texts(...)``'s files (see the module's docstring).

    ``budget``: each submission's fingerprint is made in a child process held to that many
    seconds of CPU, and all of them to ``total``; ``None``: here, unbounded (tests)."""
    by_problem = {pid: {name: [Source(*s) for s in files] for name, files in named.items()}
                  for pid, named in by_problem.items()}
    return compared(by_problem, fingerprints(by_problem, cache, budget, total), threshold)


def fingerprints(by_problem: dict[str, dict[str, list[Source]]], cache: Cache | None,
                 budget: int | None, total: float = TOTAL_BUDGET,
                 ) -> dict[tuple[str, str], "Print | str"]:
    """Each submission's fingerprint per problem, or why there is none; the smallest first,
    so that a large file waits for the others, and what is left when ``OutOfTime`` is
    raised (by the total, or by a signal handler) gets a note instead."""
    cache = cache or Cache(None)
    keys = {(pid, name): Cache.key(files) for pid, named in by_problem.items()
            for name, files in named.items()}
    todo: dict[str, list[Source]] = {}  # each distinct text once, the smallest first
    for (pid, name), key in sorted(keys.items(), key=lambda item: (
            sum(len(s.text) for s in by_problem[item[0][0]][item[0][1]]), item[0])):
        if cache.get(key) is None:
            todo.setdefault(key, by_problem[pid][name])
    why = "not compared"  # (each has a fingerprint or why not, unless the time ran out)
    try:
        made = fingerprint_each(list(todo.items()), budget, total) if budget is not None \
            else ((key, Print.of_sources(sources)) for key, sources in todo.items())
        for key, result in made:
            cache.put(key, result)
    except OutOfTime as exc:
        why = f"not compared: {exc} before its files were fingerprinted"
    return {sub: cache.get(key) or why for sub, key in keys.items()}


def compared(by_problem: dict[str, dict[str, list[Source]]],
             found: dict[tuple[str, str], "Print | str"], threshold: float) -> dict:
    """Per problem: the groups alike, the pairs at least ``threshold`` % alike, and a note
    for each file decoded otherwise than Python does, cut, or not compared at all."""
    out: dict = {}
    for pid, named in by_problem.items():
        notes = [{"submission": name, "note": f"{s.file} cannot be decoded as Python decodes "
                  f"it ({s.undecodable}): compared as UTF-8, bad bytes replaced"}
                 for name in sorted(named) for s in named[name] if s.undecodable]
        for name in sorted(named):
            result = found[pid, name]
            notes += [{"submission": name, "note": note} for note in
                      ([result] if isinstance(result, str) else result.notes)]
        prints = {name: found[pid, name] for name in named
                  if isinstance(found[pid, name], Print)}
        out[pid] = {**_compare(prints, threshold), "notes": notes}
    return out


def _compare(prints: dict[str, Print], threshold: float) -> dict:
    by_canonical: dict[str, list[str]] = {}
    for name, found in prints.items():
        by_canonical.setdefault(found.canonical, []).append(name)
    groups = sorted((sorted(g) for g in by_canonical.values() if len(g) > 1), key=len,
                    reverse=True)
    chosen = sorted(g[0] for g in by_canonical.values() if prints[g[0]].coverage)
    pairs = []
    for a, b in itertools.combinations(chosen, 2):  # one representative a distinct text
        percent = 100 * share(prints[a], prints[b])
        if percent >= threshold:
            pairs.append({"a": a, "b": b, "percent": round(percent, 1)})
    pairs.sort(key=lambda d: -d["percent"])
    return {"identical": groups, "similar": pairs, "threshold": threshold}


class Background:
    """The report computed in a process of its own, started before the runs at the lowest
    priority (it takes only CPU the runs leave) and raised to normal once they are done."""

    def __init__(self, submissions, problems, threshold: float, cache: Path | None) -> None:
        data = json.dumps({"texts": texts(submissions, problems), "threshold": threshold,
                           "cache": str(cache) if cache else None}).encode()
        nice = shutil.which("nice")  # set before the process starts: no race with ``wait``
        self.proc = subprocess.Popen(
            [*([nice, "-n", "19"] if nice else []), sys.executable, "-m",
             "workbook.grading.similarity"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env={**os.environ, "PYTHONHASHSEED": "0"})
        self.result: tuple[bytes, bytes] = (b"", b"")
        self.feeder = threading.Thread(target=self._talk, args=(data,), daemon=True,
                                       name="similarity")
        self.feeder.start()

    def _talk(self, data: bytes) -> None:
        self.result = self.proc.communicate(data)

    def wait(self) -> dict | str:
        """The report, or why there is none (a sentence)."""
        with contextlib.suppress(OSError):  # as root: back to normal priority
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, 0)
        self.feeder.join(TIMEOUT)
        if self.feeder.is_alive():  # what it has compared so far, the rest as notes
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            self.feeder.join(GRACE)
        if self.feeder.is_alive():
            self.stop()
            return (f"the similarity report took over {TIMEOUT + GRACE} s after the last run: "
                    "left out")
        out, err = self.result
        if self.proc.returncode == 3:
            return "the similarity report needs copydetect (./check.sh grade installs it)"
        try:
            return json.loads(out)
        except ValueError:
            last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            return f"the similarity report failed: {last[0]}"

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()


def main() -> int:
    """``python -m workbook.grading.similarity``: the input as JSON on stdin (``texts``,
    ``threshold``, ``cache``), the report as JSON on stdout; exit 3 without copydetect."""
    if importlib.util.find_spec("copydetect") is None:
        return 3
    job = json.load(sys.stdin)
    keep = job["cache"] and not sys.flags.hash_randomization  # else its hashes mean nothing
    cache = Cache(Path(job["cache"]) if keep else None)

    by_problem = {pid: {name: [Source(*s) for s in files] for name, files in named.items()}
                  for pid, named in job["texts"].items()}
    signal.signal(signal.SIGTERM, lambda signum, frame: stop(
        f"the report was stopped {TIMEOUT} s after the last run"))
    result = report(by_problem, job["threshold"], cache, budget=BUDGET)
    cache.save()
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
