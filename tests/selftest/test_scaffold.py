"""``./check.sh new pNN NAME`` in a copy of the repository: it writes every file a problem
needs, refuses to overwrite, and the developer check then fails on the new problem for the
reasons still open (stubs left, no reference yet, no alternate) and for nothing else."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from workbook import ROOT, scaffold

#: The selftest rows that judge one problem (as ``-k p05`` selects them).
ROWS = ["tests/selftest/test_manifest.py", "tests/selftest/test_contracts.py",
        "tests/selftest/test_web_chapters.py",
        "tests/selftest/test_book.py", "tests/selftest/test_acceptance_sets.py"]


def _copy_of_the_repository(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: nothing to copy the repository by")
    for rel in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def _run(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200",
           "WORKBOOK_PROGRESS": str(root / ".workbook" / "progress.json")}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _failures(junit: Path) -> dict[str, str]:
    """test id -> its failure message, from pytest's junit report."""
    failed = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            failed[f"{case.get('name')}"] = bad.get("message") or ""
    return failed


def test_new_writes_a_problem_that_the_developer_check_fails_for_what_is_missing(tmp_path):
    root = _copy_of_the_repository(tmp_path / "repo")
    made = _run(root, "-m", "workbook", "new", "p05", "RateLimiter")
    assert made.returncode == 0, made.stderr
    module = "p05_rate_limiter"
    for rel in ("workbook/problems/p05.toml", f"mine/{module}.py", f"solutions/{module}.py",
                "hints/p05/L1.md", "hints/p05/L2.md", "hints/p05/L3.md", f"book/{module}.md",
                "tests/p05/__init__.py", "tests/p05/test_rate_limiter.py",
                "tests/p05/CONTRACT.md"):
        assert (root / rel).is_file(), rel
        assert f"wrote {rel}" in made.stdout
    again = _run(root, "-m", "workbook", "new", "p05", "RateLimiter")
    assert again.returncode == 2 and "p05 exists already" in again.stderr

    listed = _run(root, "-m", "workbook", "list")
    assert listed.returncode == 0 and "RateLimiter" in listed.stdout

    junit = tmp_path / "junit.xml"
    check = _run(root, "-m", "pytest", *ROWS, "-k", "p05", "-p", "no:cacheprovider",
                 "-p", "no:xdist", "-q", f"--junitxml={junit}")
    failed = _failures(junit)
    assert check.returncode == 1, check.stdout[-3000:]
    assert set(failed) == {"test_no_scaffold_placeholder_is_left[p05]",
                           "test_the_reference_passes_every_checkpoint[p05]",
                           "test_every_problem_ships_at_least_one_alternate[p05]"}, \
        (failed, check.stdout[-3000:])
    left = failed["test_no_scaffold_placeholder_is_left[p05]"]
    for rel in ("workbook/problems/p05.toml", f"mine/{module}.py", f"solutions/{module}.py",
                "hints/p05/L1.md", f"book/{module}.md", "tests/p05/CONTRACT.md",
                "tests/p05/test_rate_limiter.py"):
        assert rel in left, left
    assert "not implemented" in failed["test_the_reference_passes_every_checkpoint[p05]"]
    assert "no correct solution in another style" in \
        failed["test_every_problem_ships_at_least_one_alternate[p05]"]
    passed = check.stdout.splitlines()[-1]
    assert " passed" in passed and "error" not in passed, passed  # the other rows hold


@pytest.mark.parametrize("args,needle", [(("p5", "X"), "two digits"),
                                         (("p05", "rate_limiter"), "CamelCase"),
                                         (("p01", "OutputSink"), "p01 exists already")])
def test_new_refuses_a_bad_id_a_bad_name_and_an_existing_problem(args, needle, tmp_path):
    root = tmp_path
    (root / "book").mkdir()
    if args[0] == "p01":
        (root / "workbook" / "problems").mkdir(parents=True)
        (root / "workbook" / "problems" / "p01.toml").write_text("")
    from workbook.errors import UsageError
    with pytest.raises(UsageError, match=needle):
        scaffold.scaffold(*args, root=root)
    assert not (root / "mine").exists()  # nothing written


def test_snake_case_of_a_class_name():
    assert scaffold.snake("RateLimiter") == "rate_limiter"
    assert scaffold.snake("LRUCache2") == "lrucache2"


def test_authoring_guide_manifest_example_loads(tmp_path):
    """The manifest shown in docs/authoring.md is one the loader accepts, with the fields
    the scaffold writes."""
    import re

    from workbook import manifest
    text = (ROOT / "docs" / "authoring.md").read_text("utf-8")
    block = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "p05.toml").write_text(block)
    problem = manifest.load_problem(tmp_path / "p05.toml")
    assert problem.pitfalls and problem.wrongs and problem.checkpoints
    written = scaffold.files("p05", "RateLimiter", tmp_path)
    keys = lambda toml: set(re.findall(r"^(\w+) =", toml, re.M))  # noqa: E731
    scaffolded = next(t for p, t in written.items() if p.suffix == ".toml")
    assert keys(scaffolded) <= keys(block)
    assert "./check.sh new" in text
