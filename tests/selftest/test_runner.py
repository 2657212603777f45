"""The runner: a hard wall-clock limit still reports what finished; reports are per test."""
from __future__ import annotations

import textwrap

from workbook import manifest
from workbook.run import run_check

P01 = manifest.get("p01")


def test_a_run_killed_by_its_wall_clock_limit_still_reports_the_checkpoints_that_finished(
        tmp_path):
    # put("x") is first called from the test thread itself in the timeout checkpoint: there
    # it never returns, so only the whole-run limit can end the run.
    stuck = tmp_path / "p01_output_sink.py"
    stuck.write_text(textwrap.dedent("""
        import time
        from solutions.p01_output_sink import OutputSink as _Reference

        class OutputSink(_Reference):
            def put(self, item):
                if item == "x":
                    time.sleep(3600)
                super().put(item)
    """))
    result = run_check(P01, stuck, time_limit=12)
    status = {cp.id: cp for cp in result.checkpoints}
    assert result.incomplete and not result.passed
    assert status["p01.fifo"].status == "passed"
    assert status["p01.one_wakeup"].status == "passed"
    assert status["p01.timeout"].status == "failed"
    assert "stopped after 12 s" in status["p01.timeout"].message
    assert result.seconds < 30


def test_a_file_that_exits_the_process_at_import_is_reported_not_trusted(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("import os\nos._exit(0)\n")
    result = run_check(P01, bad)
    assert not result.passed and result.incomplete
    assert all(cp.status == "failed" for cp in result.checkpoints)
