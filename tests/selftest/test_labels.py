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


def test_a_poller_that_lets_go_of_the_lock_is_not_said_to_sleep_holding_it():
    """Issue 23.3: '…sleeping while holding the lock' was said of a put() that let go of
    the lock to sleep 1 ms between looks; it is named only when a probe cannot get the
    lock meanwhile, else the rule it breaks (it polls)."""
    import threading
    import time

    from tests.p03.support import POLLS, spinner_pitfall
    from workbook.testkit import start_daemon

    class Queue:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.stop = threading.Event()

        def __len__(self) -> int:
            with self.lock:
                return 0

        def put(self, hold: bool) -> None:
            if hold:  # the pitfall: asleep in a loop with the lock held
                with self.lock:
                    while not self.stop.is_set():
                        time.sleep(0.001)
            while not self.stop.is_set():  # polling: the lock is let go of to sleep
                with self.lock:
                    pass
                time.sleep(0.001)

        take = put

    named = {}
    for case, hold, call in (("holds", True, None), ("polls", False, None),
                             ("polls in a lambda", False, "lambda")):
        q = Queue()
        thread = start_daemon(q.put, hold) if call is None else \
            start_daemon(lambda q=q, hold=hold: q.put(hold))
        try:
            named[case] = spinner_pitfall(thread, "spin_holding_lock")
        finally:
            q.stop.set()
            thread.join(5)
    assert named == {"holds": "spin_holding_lock", "polls": POLLS,
                     "polls in a lambda": POLLS}, named
    assert view.panel([CheckpointResult("p03.put_blocks", "t", "core", "failed", message="m",
                                        pitfall=POLLS)], P03).looks_like.startswith(
        "breaking the rule: Waiting releases the lock")


def test_repeat_json_does_not_count_an_extension_not_attempted_as_failed():
    from workbook import cli
    cps = [CheckpointResult(cp.id, cp.title, cp.kind,
                            "passed" if cp.kind == "core" else "not_attempted")
           for cp in P03.checkpoints]
    doc = cli._json([Result("p03", "f.py", cps), Result("p03", "f.py", cps)])
    assert doc["failed_runs"] == 0 and [r["failed"] for r in doc["each_run"]] == [[], []]
