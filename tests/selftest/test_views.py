"""One view of a result: the page draws the panels the terminal draws.

The reference, the skeleton and every pitfall and wrong variant are compared where
test_acceptance_sets.py checks them (no second run); here the cases no other test checks:
a syntax error, an exception at import, a file that defines none of the names, and a result
built by hand with two causes of which one spans several checkpoints."""
from __future__ import annotations

import pytest

from tests.selftest.conftest import checked
from tests.selftest.views_check import assert_same_panels, terminal_panels, terminal_text
from workbook import manifest, view
from workbook.run import CheckpointResult, Result, run_check

pytest.importorskip("starlette")
P01 = manifest.get("p01")


def test_a_syntax_error_is_one_line_with_its_caret_on_both(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("class OutputSink:\n    def put(self, item)\n        pass\n")
    result = run_check(P01, bad)
    assert result.import_error and "^" in result.import_error
    assert_same_panels(result, P01)
    shown = view.result_view(result, P01)
    assert shown.panels == [] and shown.blocker_kind == "import_error"


def test_an_exception_at_import_is_one_line_on_both(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("import no_such_module_here\n")
    result = run_check(P01, bad)
    assert result.import_error and "no_such_module_here" in result.import_error
    assert_same_panels(result, P01)


def test_a_file_defining_no_names_is_one_missing_name_line_on_both(tmp_path):
    empty = tmp_path / "p01_output_sink.py"
    empty.write_text("")
    result = checked("p01", str(empty))
    shown = view.result_view(result, P01)
    assert [p.kind for p in shown.panels] == ["missing"], shown.panels
    assert "defines no `OutputSink`" in shown.panels[0].title
    assert_same_panels(result, P01)


def _cp(i: int, **kw) -> CheckpointResult:
    cp = P01.checkpoints[i]
    return CheckpointResult(cp.id, cp.title, cp.kind, kw.pop("status", "failed"), **kw)


def test_one_panel_per_root_cause_on_both():
    cause = "ValueError: x @ p01_output_sink.py:9 in OutputSink.put"
    result = Result("p01", str(P01.solution_file), [
        _cp(0, status="passed"),
        _cp(1, message="ValueError: x (raised at line 9)", cause=cause),
        _cp(2, message="ValueError: x (raised at line 9)", cause=cause),
        _cp(3, message="lost an item", pitfall="single_drain"),
        _cp(4, message="ValueError: x (raised at line 9)", cause=cause),
        _cp(5, message="lost an item", pitfall="no_such_pitfall"),
    ])
    shown = view.result_view(result, P01, hints_seen=0)
    assert [p.checkpoints for p in shown.panels] == [
        ["p01.one_wakeup", "p01.timeout", "p01.pingpong"], ["p01.producers"],
        ["p01.injected_put"]]
    assert shown.panels[0].title.endswith("(+2 more)") and len(shown.panels[0].same_cause) == 3
    assert shown.panels[1].looks_like == P01.pitfall("single_drain").title
    assert shown.panels[2].looks_like == "no such pitfall"  # words, never a raw id
    assert all(p.hint == 1 for p in shown.panels)  # nothing opened yet: level 1 first
    assert len(terminal_panels(terminal_text(result, P01))) == 3
    assert_same_panels(result, P01)


def test_checks_that_word_one_pitfall_or_one_slowness_differently_share_a_panel():
    # Issue 23.3: per_put_wakeup showed 4 panels, polling 5, each check wording the same
    # mistake its own way; a queue that sleeps in every call, 5 (one per slowed check).
    result = Result("p01", str(P01.solution_file), [
        _cp(0, status="passed"),
        _cp(1, message="expected 1 wakeup, got 3", pitfall="per_put_wakeup"),
        _cp(2, message="slow, not stuck: asleep in time.sleep at f.py:9",
            cause="slow: asleep in time.sleep"),
        _cp(3, message="20000 wakeups for 109 calls", pitfall="per_put_wakeup"),
        _cp(4, message="a burst of 5 puts scheduled 5 wakeups", pitfall="per_put_wakeup"),
        _cp(5, message="slow, not stuck: asleep in time.sleep at f.py:12",
            cause="slow: asleep in time.sleep"),
    ])
    shown = view.result_view(result, P01, hints_seen=0)
    assert [p.checkpoints for p in shown.panels] == [
        ["p01.one_wakeup", "p01.producers", "p01.pingpong"],
        ["p01.timeout", "p01.injected_put"]], shown.panels
    assert shown.panels[0].message == "expected 1 wakeup, got 3"
    assert len(terminal_panels(terminal_text(result, P01))) == 2
    assert_same_panels(result, P01)


def test_the_comparison_fails_when_the_page_would_show_other_panels(monkeypatch):
    from workbook.web import app
    result = Result("p01", str(P01.solution_file), [
        _cp(0, message="lost an item", pitfall="single_drain"),
        _cp(1, message="another cause")] + [_cp(i, status="passed") for i in range(2, 6)])
    assert_same_panels(result, P01)
    describe = app.describe
    for change in (lambda d: d["diagnoses"].pop(),
                   lambda d: d["diagnoses"][0].update(hint=3),
                   lambda d: d["diagnoses"][1].update(message="something else"),
                   lambda d: d["diagnoses"].reverse()):
        def altered(problem, res, change=change):
            doc = describe(problem, res)
            change(doc)
            return doc
        monkeypatch.setattr(app, "describe", altered)
        with pytest.raises(AssertionError):
            assert_same_panels(result, P01)
