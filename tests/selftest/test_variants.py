"""workbook.variants: a diff of the reference becomes a checkable file, or one clear error."""
from __future__ import annotations

import difflib
import shutil
from types import SimpleNamespace

import pytest

from workbook import variants

REFERENCE = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n"


def _diff(old: str, new: str, module: str = "m", text: str = "Off by one.\n\nWhy.\n") -> str:
    label = f"solutions/{module}.py"
    body = difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                f"a/{label}", f"b/{label}")
    return text + "".join(body)


def _variant(tmp_path, diff: str, reference: str = REFERENCE):
    (tmp_path / "solutions").mkdir(exist_ok=True)
    ref = tmp_path / "solutions" / "m.py"
    ref.write_text(reference)
    problem = SimpleNamespace(id="p77", module="m", solution_file=ref)
    source = tmp_path / "w.diff"
    source.write_text(diff)
    return variants.Variant(problem, "wrong", "w", source, "g doubles", ("p77.a",))


def test_a_diff_is_applied_into_a_file_named_after_the_module(tmp_path):
    wrong = REFERENCE.replace("y * 2", "y * 3  # WRONG: triples")
    variant = _variant(tmp_path, _diff(REFERENCE, wrong))
    path = variants.materialize(variant)
    assert path.name == "m.py" and path.read_text() == wrong
    assert variants.materialize(variant) == path  # cached by content
    assert variants.parse(variant).explanation == "Off by one.\n\nWhy."


def test_a_hunk_whose_lines_moved_still_applies_where_its_context_matches(tmp_path):
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    wrong = REFERENCE.replace("y * 2", "y * 3")
    variant = _variant(tmp_path, _diff(REFERENCE, wrong))
    moved = "import os\n\n\n" + REFERENCE
    variant.problem.solution_file.write_text(moved)
    assert variants.apply(variant) == "import os\n\n\n" + wrong


def test_a_diff_that_no_longer_applies_fails_with_one_line(tmp_path):
    variant = _variant(tmp_path, _diff(REFERENCE, REFERENCE.replace("y * 2", "y * 3")))
    variant.problem.solution_file.write_text(REFERENCE.replace("return y * 2", "return 2 * y"))
    with pytest.raises(variants.VariantError, match="no longer applies") as info:
        variants.materialize(variant)
    assert "\n" not in str(info.value)


def test_a_diff_of_another_file_or_no_diff_at_all_is_refused(tmp_path):
    other = _diff(REFERENCE, REFERENCE.replace("2", "3"), module="other")
    with pytest.raises(variants.VariantError, match="labelled"):
        variants.apply(_variant(tmp_path, other))
    with pytest.raises(variants.VariantError, match="not a unified diff"):
        variants.apply(_variant(tmp_path, "just prose\n"))


def test_show_prints_the_summary_the_explanation_and_the_change(tmp_path):
    from rich.console import Console

    wrong = REFERENCE.replace("y * 2", "y * 3  # WRONG: triples")
    variant = _variant(tmp_path, _diff(REFERENCE, wrong))
    console = Console(record=True, width=120)
    variants.show(variant, console)
    out = console.export_text()
    assert "g doubles" in out and "Off by one." in out and "p77.a" in out
    assert "+    return y * 3  # WRONG: triples" in out
    assert "-    return y * 2" in out


def test_refresh_rewrites_a_moved_diff_against_the_current_reference(tmp_path):
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    wrong = REFERENCE.replace("y * 2", "y * 3")
    variant = _variant(tmp_path, _diff(REFERENCE, wrong))
    moved = "import os\n\n\n" + REFERENCE
    variant.problem.solution_file.write_text(moved)
    assert variants.refresh(variant) is True
    text = variant.source.read_text()
    assert text.startswith("Off by one.\n\nWhy.\n\n--- a/solutions/m.py\n")
    assert "@@ -6,4 +6,4 @@" in text or "@@ -6," in text
    assert variants.refresh(variant) is False
    from whatthepatch import apply_diff
    assert "\n".join(apply_diff(variants.parse(variant).patch, moved)) + "\n" \
        == "import os\n\n\n" + wrong
