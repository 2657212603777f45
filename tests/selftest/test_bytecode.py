"""The harness's bytecode: compiled once by the process that starts checks, checked by hash,
never written for a learner file."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from workbook import ROOT, bytecode, manifest
from workbook.run import run_check


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "workbook").mkdir()
    (tmp_path / "workbook" / "__init__.py").write_text("")
    (tmp_path / "workbook" / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_core.py").write_text("def test_x():\n    assert True\n")
    (tmp_path / "tests" / "conftest.py").write_text("")
    return tmp_path


def _pyc(root: Path, rel: str) -> Path:
    return Path(importlib.util.cache_from_source(str(root / rel)))


def test_warm_writes_checked_hash_bytecode_once_and_skips_what_pytest_rewrites(tmp_path):
    root = _tree(tmp_path)
    files = bytecode.harness_files(root)
    assert bytecode.warm(root, files) == 2  # workbook/__init__.py and workbook/helper.py
    head = _pyc(root, "workbook/helper.py").read_bytes()[:16]
    assert head[4:8] == bytecode.CHECKED_HASH
    assert head[8:16] == importlib.util.source_hash(b"VALUE = 1\n")
    assert not _pyc(root, "tests/test_core.py").exists()
    assert not _pyc(root, "tests/conftest.py").exists()
    assert bytecode.warm(root, files) == 0  # nothing changed: nothing written


def test_an_edited_module_gets_new_bytecode_and_its_old_one_is_never_run(tmp_path):
    root = _tree(tmp_path)
    bytecode.warm(root, bytecode.harness_files(root))
    # Same size, same second: a timestamp-checked .pyc would still be taken for current.
    (root / "workbook" / "helper.py").write_text("VALUE = 2\n")
    value = subprocess.run(
        [sys.executable, "-B", "-c", "import workbook.helper as h; print(h.VALUE)"],
        cwd=root, capture_output=True, text=True, timeout=60).stdout.strip()
    assert value == "2"
    assert bytecode.warm(root, bytecode.harness_files(root)) == 1


def test_a_tree_where_bytecode_cannot_be_written_is_left_as_it_is(tmp_path):
    root = _tree(tmp_path)
    (root / "workbook" / "__pycache__").write_text("a file where the folder would go")
    assert bytecode.warm(root, bytecode.harness_files(root)) == 0
    assert (root / "workbook" / "__pycache__").read_text() == "a file where the folder would go"


def test_a_check_compiles_the_harness_but_leaves_no_bytecode_beside_the_learner_file(
        tmp_path, monkeypatch):
    p01 = manifest.get("p01")
    learner = tmp_path / "p01_output_sink.py"
    learner.write_text(p01.learner_file.read_text("utf-8"))  # the skeleton: a quick check
    pyc = _pyc(ROOT, "workbook/testkit/waits.py")
    pyc.unlink(missing_ok=True)
    monkeypatch.setattr(bytecode, "_warmed", set())  # as in a fresh process
    result = run_check(p01, learner)
    assert result.skeleton
    assert pyc.read_bytes()[4:8] == bytecode.CHECKED_HASH
    assert not (tmp_path / "__pycache__").exists()
