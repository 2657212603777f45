"""The similarity report compares what Python runs, in time linear in what matters, and no
single file takes the report of the class with it (red team round 2: #5 utf7_copy, #10
similarity_stall).  Unit tests of ``similarity``'s steps; no grading runs."""
from __future__ import annotations

import base64
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbook import ROOT, manifest, variants
from workbook.grading import discovery, similarity

P01 = manifest.get("p01")
SOURCE = P01.solution_file.read_text()


def _utf7_everywhere(text: str) -> bytes:
    """``text`` with an encoding declaration of UTF-7 and every line one base64 run: the
    same program to Python, no token in common with it to a UTF-8 reader."""
    lines = ["# -*- coding: utf-7 -*-"]
    for line in text.split("\n"):
        run = base64.b64encode(line.encode("utf-16-be")).decode().rstrip("=")
        lines.append(f"+{run}-" if line else "")
    return "\n".join(lines).encode("ascii")


def _class(tmp_path: Path, files: dict[str, bytes]) -> list[discovery.Submission]:
    for name, data in files.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / P01.learner_file.name).write_bytes(data)
    return discovery.discover(tmp_path, [P01])


def _alike(report: dict) -> dict[frozenset, float]:
    pairs = {frozenset((d["a"], d["b"])): d["percent"] for d in report["p01"]["similar"]}
    for group in report["p01"]["identical"]:
        pairs.update({frozenset((a, b)): 100.0 for a in group for b in group if a != b})
    return pairs


def test_a_copy_re_encoded_under_an_encoding_declaration_is_read_as_python_reads_it(tmp_path):
    copy = _utf7_everywhere(SOURCE)
    compile(copy, "copy.py", "exec")  # the same program to Python
    assert b"self" not in copy
    latin1 = ("# -*- coding: cp1252 -*-\n# café\n" + SOURCE).encode("cp1252")
    subs = _class(tmp_path, {"carol": SOURCE.encode(), "mallory": copy, "lena": latin1,
                             "bom": b"\xef\xbb\xbf" + SOURCE.replace("\n", "\r\n").encode(),
                             "bob": P01.learner_file.read_bytes()})
    texts = similarity.texts(subs, [P01])["p01"]
    assert texts["mallory"][0].text.split("\n", 1)[1] == SOURCE
    assert texts["bom"][0].text == SOURCE and not texts["bom"][0].undecodable
    report = similarity.report(similarity.texts(subs, [P01]), 90)
    assert report["p01"]["identical"] == [["bom", "carol", "lena", "mallory"]]
    assert report["p01"]["notes"] == [] and not _alike(report).get(frozenset(("bob", "carol")))


@pytest.mark.parametrize("data, why", [
    (b"# coding: no-such-codec\n" + SOURCE.encode(), "unknown encoding"),
    (b"# coding: rot13\n" + SOURCE.encode(), "not a text encoding"),
    (SOURCE.encode() + b"\nX = '\xff\xfe not UTF-8'\n", "can't decode byte 0xff")])
def test_a_file_python_cannot_decode_is_compared_as_utf8_and_named_in_a_note(
        tmp_path, data, why):
    with pytest.raises(SyntaxError):
        compile(data, "bad.py", "exec")  # Python would not run it either
    subs = _class(tmp_path, {"carol": SOURCE.encode(), "mallory": data})
    report = similarity.report(similarity.texts(subs, [P01]), 90)
    (note,) = report["p01"]["notes"]
    assert note["submission"] == "mallory" and why in note["note"], note
    assert P01.learner_file.name in note["note"]
    assert _alike(report)[frozenset(("carol", "mallory"))] >= 90  # compared all the same


def test_bytes_python_lets_pass_in_a_comment_are_no_reason_for_a_note(tmp_path):
    data = SOURCE.encode() + b"\n# \xff\xfe not UTF-8\n"
    compile(data, "ok.py", "exec")
    subs = _class(tmp_path, {"carol": SOURCE.encode(), "mallory": data})
    report = similarity.report(similarity.texts(subs, [P01]), 90)
    assert report["p01"]["identical"] == [["carol", "mallory"]] and not report["p01"]["notes"]


def test_blank_lines_and_trailing_spaces_are_left_out_except_inside_strings():
    padded = re.sub(r"^([ \t]*def .*)$", "\\1  \t", SOURCE, flags=re.M)
    padded += " \n" * 20_000 + "\f\n\t\n"
    assert padded.count("  \t\n") >= 4
    assert similarity.normalised(padded) == similarity.normalised(SOURCE)
    assert similarity.normalised(SOURCE + "X = (\n" + " \n" * 1000 + ")\n").count("\n") \
        == similarity.normalised(SOURCE).count("\n") + 2
    inside = 'T = """a  \n\n  \nb"""  \nf(  \n\n)\n'
    assert similarity.normalised(inside) == 'T = """a  \n\n  \nb"""\nf(\n)\n'
    broken = 'def f(:\n   \n    x = """\n\n'  # the tokenizer stops: lines as they are
    assert similarity.normalised(broken).startswith("def f(:\n")


def test_normalising_changes_nothing_copydetect_sees_in_the_shipped_files():
    from copydetect.utils import filter_code
    files = [p.solution_file for p in manifest.problems().values()]
    files += [path for p in manifest.problems().values() for _, path in variants.alternates(p)]
    files += [ROOT / "workbook" / "scaffold.py"]  # multi-line strings with blank lines
    for path in files:
        text = path.read_text()
        assert filter_code(similarity.normalised(text), "a.py", "python")[0] == \
            filter_code(text, "a.py", "python")[0], path


def test_a_copy_padded_with_200000_blank_lines_is_found_identical(tmp_path):
    padded = (SOURCE + " \n" * 200_000).encode()
    assert len(padded) < discovery.MAX_FILE
    subs = _class(tmp_path, {"carol": SOURCE.encode(), "mallory": padded})
    files = similarity.texts(subs, [P01])["p01"]
    assert len(similarity.prepared(files["mallory"])[0]) < len(SOURCE)  # what the lexer sees
    report = similarity.report(similarity.texts(subs, [P01]), 90, budget=similarity.BUDGET)
    assert report["p01"]["identical"] == [["carol", "mallory"]] and not report["p01"]["notes"]


def test_a_file_longer_than_the_cap_is_compared_up_to_it_with_a_note(monkeypatch):
    monkeypatch.setattr(similarity, "MAX_TEXT", len(similarity.normalised(SOURCE)) + 10)
    long = SOURCE + "\n".join(f"V{i} = {i} * 2" for i in range(2000)) + "\n"
    source = similarity.Source(P01.learner_file.name, long, "")
    found = similarity.Print.of_sources([source])
    (note,) = found.notes
    assert f"only its first {similarity.MAX_TEXT} of" in note and P01.learner_file.name in note
    assert similarity.share(found, similarity.Print.of(SOURCE)) > 0.99


def _slow_for(marker: str):
    """``Print.of_sources``, spinning for ever on files that contain ``marker``."""
    real = similarity.Print.of_sources

    def of_sources(sources):
        if any(marker in s.text for s in sources):
            while True:
                pass
        return real(sources)
    return of_sources


def _files(**texts: str) -> dict[str, list[similarity.Source]]:
    return {name: [similarity.Source(P01.learner_file.name, text, "")]
            for name, text in texts.items()}


def test_a_file_over_its_cpu_budget_is_left_out_and_the_others_are_still_compared(
        monkeypatch):
    monkeypatch.setattr(similarity.Print, "of_sources", _slow_for("SLOW"))
    renamed = SOURCE.replace("_items", "_queue")
    slow = SOURCE + "# SLOW\n"  # fingerprinted after carol (longer): one child each side
    report = similarity.report({"p01": _files(carol=SOURCE, copy=renamed, slow=slow,
                                              zz=SOURCE + "\n" * 50 + "X = 1\n")},
                               90, budget=1)
    assert report["p01"]["identical"] == [["carol", "copy"]]
    assert _alike(report)[frozenset(("carol", "zz"))] >= 90  # compared after the slow one
    (note,) = report["p01"]["notes"]
    assert note == {"submission": "slow", "note": "not compared: its files took over 1 s of "
                                                  "CPU to fingerprint"}
    from rich.console import Console
    from workbook.grading import batch
    console = Console(width=200, record=True)
    console.print(batch.similarity_view(report))
    assert "slow: not compared: its files took over 1 s of CPU" in console.export_text()


def test_when_the_total_budget_is_spent_the_rest_get_a_note_and_what_was_done_is_kept(
        monkeypatch):
    monkeypatch.setattr(similarity.Print, "of_sources", _slow_for("SLOW"))
    report = similarity.report({"p01": _files(carol=SOURCE, copy=SOURCE + "X = 1\n",
                                              slow=SOURCE + "# SLOW\n" * 2,
                                              later=SOURCE * 2)}, 90, budget=5, total=3)
    # 3 s, not 1 (RLIMIT_CPU counts whole seconds): a fresh-clone selftest beside other
    # checks left the first pair undone within 1 s; the spinner spends any total anyway
    assert _alike(report)[frozenset(("carol", "copy"))] >= 99  # done before the time ran out
    notes = {n["submission"]: n["note"] for n in report["p01"]["notes"]}
    assert sorted(notes) == ["later", "slow"]
    assert all("spent its 3 s of CPU" in note for note in notes.values()), notes


_STOPPED = r'''
import sys
from workbook.grading import similarity
real = similarity.Print.of_sources
def of_sources(sources):
    if any("SLOW" in s.text for s in sources):
        print("spinning", file=sys.stderr, flush=True)
        while True:
            pass
    return real(sources)
similarity.Print.of_sources = of_sources
sys.exit(similarity.main())
'''


def test_a_stopped_report_still_gives_what_it_compared(tmp_path):
    job = {"texts": {"p01": _files(carol=SOURCE, copy=SOURCE, slow=SOURCE + "# SLOW\n")},
           "threshold": 90, "cache": None}
    proc = subprocess.Popen([sys.executable, "-c", _STOPPED], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
        deadline = time.monotonic() + 120  # the slow item has started: then stop it
        while select.select([proc.stderr], [], [], max(0, deadline - time.monotonic()))[0]:
            if b"spinning" in proc.stderr.readline():
                break
        else:
            pytest.fail("the slow item never started")
        proc.send_signal(signal.SIGTERM)
        out = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    report = json.loads(out)["p01"]
    assert report["identical"] == [["carol", "copy"]]
    (note,) = report["notes"]
    assert note["submission"] == "slow" and "stopped" in note["note"], note


def test_a_fingerprint_kept_by_one_batch_compares_with_one_made_by_the_next(tmp_path):
    cache = tmp_path / "fingerprints.json"
    first = tmp_path / "first"
    first.mkdir()
    subs = _class(first, {"carol": SOURCE.encode(), "bob": P01.learner_file.read_bytes()})
    found = similarity.Background(subs, [P01], 90, cache).wait()
    assert found["p01"]["identical"] == [] and cache.exists()
    second = tmp_path / "second"  # carol's fingerprint comes from the cache this time
    second.mkdir()
    subs = _class(second, {"carol": SOURCE.encode(),
                           "copy": SOURCE.replace("_items", "_queue").encode()})
    found = similarity.Background(subs, [P01], 90, cache).wait()
    assert found["p01"]["identical"] == [["carol", "copy"]], found
    assert os.stat(cache).st_size > 0
