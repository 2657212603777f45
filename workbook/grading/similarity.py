"""Which submissions are alike: copydetect's fingerprints (MOSS-style winnowing over its
tokenizer, which replaces every name, drops comments, layout and docstrings) of every file of
each submission, a file with a syntax error included.

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

import base64
import contextlib
import functools
import hashlib
import importlib.util
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: copydetect's fingerprint: k-grams of this many tokens, winnowed over this many.
K, WINDOW = 25, 1
#: The cache file's format (a different one is ignored and rewritten).
FORMAT = f"workbook-fingerprints/1 k={K} w={WINDOW}"
#: Seconds the background similarity may take after the last run before it is given up.
TIMEOUT = 600


@dataclass(frozen=True, eq=False)
class Print:
    """One text's fingerprint: the hash of each fingerprinted k-gram, by position."""
    canonical: str          # SHA-256 of the normalised tokens: equal when alike
    spots: "np.ndarray"     # positions (token offsets) of the fingerprints, ascending
    hashes: "np.ndarray"    # the fingerprint at each of those positions
    coverage: int           # tokens the fingerprints cover (copydetect's figure)

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
        return {"canonical": self.canonical, "coverage": self.coverage,
                "spots": base64.b64encode(self.spots.astype("<i4").tobytes()).decode(),
                "hashes": base64.b64encode(self.hashes.astype("<i8").tobytes()).decode()}

    @classmethod
    def from_json(cls, data: dict) -> "Print":
        import numpy as np
        return cls(data["canonical"],
                   np.frombuffer(base64.b64decode(data["spots"]), "<i4").astype(np.int64),
                   np.frombuffer(base64.b64decode(data["hashes"]), "<i8").astype(np.int64),
                   int(data["coverage"]))


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
        self.used: set[str] = set()
        if path is not None:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                doc = json.loads(path.read_text("utf-8"))
                if doc.get("format") == FORMAT:
                    self.prints = {k: Print.from_json(v) for k, v in doc["prints"].items()}
        self.known = len(self.prints)

    def get(self, text: str) -> Print:
        key = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
        self.used.add(key)
        if key not in self.prints:
            self.prints[key] = Print.of(text)
        return self.prints[key]

    def save(self) -> None:
        """Keep what this batch used (a vanished submission's fingerprint goes)."""
        if self.path is None:
            return
        from workbook.grading.gradebook import atomic_write
        doc = {"format": FORMAT, "prints": {k: self.prints[k].to_json()
                                            for k in sorted(self.used)}}
        atomic_write(self.path, json.dumps(doc, separators=(",", ":")).encode())


def texts(submissions, problems) -> dict[str, dict[str, str]]:
    """Per problem, per submission: every file of it for that problem (the learner file, then
    each helper module in name order), as it is, joined into one text."""
    out: dict[str, dict[str, str]] = {}
    for p in problems:
        for sub in submissions:
            if p.id in sub.files:
                try:
                    sources = [sub.read(sub.files[p.id])]
                    sources += [data for _, data in sorted(sub.helpers(p.id).items())]
                except OSError:  # swapped since discovery: its row says so, not compared
                    continue
                out.setdefault(p.id, {})[sub.name] = "\n".join(
                    data.decode("utf-8", "replace") for data in sources)
    return out


def report(by_problem: dict[str, dict[str, str]], threshold: float,
           cache: Cache | None = None) -> dict:
    """The similarity report of ``texts(...)``'s texts (see the module's docstring)."""
    cache = cache or Cache(None)
    out: dict = {}
    for pid, subs in by_problem.items():
        prints = {name: cache.get(text) for name, text in subs.items()}
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
        out[pid] = {"identical": groups, "similar": pairs, "threshold": threshold}
    return out


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
            stderr=subprocess.PIPE)
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
        if self.feeder.is_alive():
            self.stop()
            return f"the similarity report took over {TIMEOUT} s after the last run: left out"
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
    cache = Cache(Path(job["cache"]) if job["cache"] else None)
    result = report(job["texts"], job["threshold"], cache)
    cache.save()
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
