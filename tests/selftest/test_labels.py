"""Labels are sentences for people, and --json carries the same panels (issue 23.3)."""
from __future__ import annotations

import json

from tests.selftest.conftest import cli
from workbook import manifest, view
from workbook.run import CheckpointResult, Result

P01, P03 = manifest.get("p01"), manifest.get("p03")


def test_a_wrong_variant_is_named_by_the_rule_it_breaks_never_by_its_id():
    cp = CheckpointResult("p03.interrupt", "t", "core", "failed", message="m",
                          pitfall="interrupt_loses_wakeup")
    shown = view.panel([cp], P03)
    assert shown.looks_like.startswith("breaking the rule: An exception raised")
    assert "interrupt_loses_wakeup" not in shown.looks_like
    cp.pitfall = "some_unknown_name"
    assert view.panel([cp], P03).looks_like == "some unknown name"


def test_extensions_not_attempted_are_not_counted_as_failed():
    cps = [CheckpointResult(cp.id, cp.title, cp.kind,
                            "passed" if cp.kind == "core" else "not_attempted")
           for cp in P03.checkpoints]
    ext = sum(cp.kind == "extension" for cp in P03.checkpoints)
    assert ext
    line = view.verdict(Result("p03", "f.py", cps), P03)
    assert f"0 of {ext}" not in line and "extensions not attempted" in line, line


def test_json_has_one_panel_per_root_cause_and_keeps_every_key():
    out = cli("p03", "--wrong", "interrupt_loses_wakeup", "--json")
    doc = json.loads(out.stdout)
    assert {"problem", "file", "passed", "import_error", "incomplete", "seconds",
            "checkpoints"} <= set(doc)
    failed = [cp for cp in doc["checkpoints"] if cp["status"] == "failed"]
    assert doc["panels"] and sum(len(p["checkpoints"]) for p in doc["panels"]) == len(failed)
    for panel in doc["panels"]:
        assert "_" not in (panel["looks_like"] or "").split(":")[0], panel
        assert panel["title"].startswith("✗ ") and panel["message"]
    assert doc["blocker"] is None


def test_json_of_an_import_error_is_one_block_and_no_panel(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("import no_such_module_here\n")
    doc = json.loads(cli("p01", "--file", str(bad), "--json").stdout)
    assert doc["panels"] == [] and "no_such_module_here" in doc["blocker"]
