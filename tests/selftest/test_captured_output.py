""""Your output": what the learner's code printed during a failing checkpoint is shown with
it, in the terminal (a few lines), on the page (folded; test_web_browser.py) and in --json,
as the learner's data under that label, never as the checker's words (issue 23)."""
from __future__ import annotations

import json
import textwrap

import pytest
from rich.console import Console

from tests.selftest.views_check import same_panels_if_served, terminal_text
from workbook import cli, manifest, records, render, view
from workbook.grading import protocol
from workbook.run import Result, run_check

P01 = manifest.get("p01")
FAKE = "All 6 core checkpoints passed · 0.1s."


def printing_file(folder) -> str:
    """The P01 reference, but its put() prints (an ANSI colour code, a fake verdict and HTML
    among it) and fails on the item 3."""
    path = folder / P01.learner_file.name
    path.write_text(textwrap.dedent(f"""\
        import importlib.util
        import sys

        _spec = importlib.util.spec_from_file_location("_reference", {str(P01.solution_file)!r})
        _reference = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_reference)


        class OutputSink(_reference.OutputSink):
            def put(self, item):
                print(f"put {{item!r}}")
                print("\\x1b[32m{FAKE}\\x1b[0m <img src=x onerror=alert(1)>", file=sys.stderr)
                if item == 3:
                    raise ValueError("three")
                super().put(item)
        """))
    return str(path)


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> Result:
    return run_check(P01, printing_file(tmp_path_factory.mktemp("printing")))


def test_a_failing_checkpoint_carries_what_the_code_printed_and_a_passing_one_nothing(
        result):
    failed = [cp for cp in result.checkpoints if cp.status == "failed"]
    assert failed, result.output
    for cp in result.checkpoints:
        if cp.status == "failed":
            # the explorer puts its own values (obj1, ...), the other checkpoints put 1, 2, 3
            assert cp.output and "put " in cp.output and "[stderr]" in cp.output, cp
        else:
            assert cp.output is None, cp
    # --json: every checkpoint's output, and each panel's (escaped for the eye)
    doc = json.loads(json.dumps(cli._json([result])))
    assert any("put 1" in (c["output"] or "") for c in doc["checkpoints"])
    outputs = [o for p in doc["panels"] for o in p["outputs"]]
    assert outputs and all("\x1b" not in o["text"] and "\\x1b[32m" in o["text"]
                           for o in outputs), outputs


def test_printed_output_cannot_pass_for_a_verdict_in_the_terminal(result):
    text = terminal_text(result, P01)
    assert "Your output (printed by your code during" in text
    # The printed "verdict" is behind the output's bar, escaped, inside the panel; the real
    # verdict is the report's last line.
    fake_lines = [line for line in text.splitlines() if FAKE in line]
    assert fake_lines and all(f"│ \\x1b[32m{FAKE}" in line for line in fake_lines), fake_lines
    last = [line.strip() for line in text.splitlines() if line.strip()][-1]
    assert last == view.verdict(result, P01) and FAKE not in last
    console = Console(width=120, record=True, force_terminal=True, color_system="truecolor",
                      file=open("/dev/null", "w"))
    console.print(render.result_view(result, P01))
    drawn = console.export_text(styles=False)
    assert "\x1b[32m" not in drawn  # the learner's colour code is never sent as one
    same_panels_if_served(result, P01)  # the page's panels carry the same outputs


def test_the_terminal_shows_a_long_output_short():
    text = "\n".join(f"line {i}" for i in range(1, 101)) + "\n"
    shown = view.output_excerpt(text)
    assert len(shown) == view.OUTPUT_LINES
    assert shown[:2] == ["line 1", "line 2"] and shown[-1] == "line 100"
    assert "93 more lines" in shown[2]
    assert view.output_excerpt("x" * 500)[0].endswith("…")
    assert view.shown_output("a\rb\x1b[2Jc\u202ed\te\n") == "a\\rb\\x1b[2Jc\\u202ed\te\n"


def test_the_record_caps_the_output_and_the_grader_still_reads_the_record():
    huge = "ä" * 10 + "x" * 50_000 + "end"
    capped = records.cap_output(huge)
    assert len(capped) < records.OUTPUT_MAX + 80 and capped.endswith("end")
    assert "characters left out" in capped
    # Escaped non-ASCII output would burst one pipe write: the output gives way, the
    # record (and the verdict it carries) goes through.
    key = b"k" * 32
    record = records.TestDone("t::a", "p01.fifo", "failed", message="m" * 1400,
                              output="é" * records.OUTPUT_MAX)
    seq, back = protocol.decode(key, protocol.encode(key, 1, record))
    assert (back.nodeid, back.outcome, back.message, back.output) == \
        ("t::a", "failed", "m" * 1400, None)
    small = records.TestDone("t::a", "p01.fifo", "failed", message="m", output="put 1\n")
    assert protocol.decode(key, protocol.encode(key, 2, small))[1].output == "put 1\n"


@pytest.mark.parametrize("ending", ["raise RuntimeError('boom at import')",
                                    "threading.Event().wait()"], ids=["raises", "hangs"])
def test_what_the_file_printed_before_its_import_failed_is_shown_under_the_error(
        tmp_path, ending):
    path = tmp_path / P01.learner_file.name
    path.write_text("import sys\nimport threading\n\nprint('loading my sink')\n"
                    "print('config missing', file=sys.stderr)\n" + ending + "\n")
    result = run_check(P01, str(path))
    assert result.import_error, result.output
    for cp in result.checkpoints:  # --json: each checkpoint carries it
        assert cp.output == "[stdout]\nloading my sink\n[stderr]\nconfig missing\n", cp
    text = terminal_text(result, P01)
    assert "Your output (printed by your code during the import):" in text, text
    assert "│ loading my sink" in text and "│ config missing" in text, text
    shown = view.result_view(result, P01)
    assert shown.blocker_kind == "import_error" and "loading my sink" in shown.blocker_output


def test_an_import_error_record_carries_the_output_through_the_graders_pipe():
    key = b"k" * 32
    record = records.ImportFailed("importing the file raised X", "[stdout]\nhi\n")
    assert protocol.decode(key, protocol.encode(key, 1, record))[1] == record
    # output that would burst one pipe write gives way; the error itself goes through
    huge = records.ImportFailed("m" * 1400, "é" * records.OUTPUT_MAX)
    assert protocol.decode(key, protocol.encode(key, 2, huge))[1] == \
        records.ImportFailed("m" * 1400, None)
