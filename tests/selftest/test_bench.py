"""The benchmarks run, report every design they promise, and survive broken or missing ones.

Smoke tests only: each bench runs in its tiny ``--quick`` mode.  Nothing here looks at how
fast anything was -- a benchmark never passes or fails on time.
"""
from __future__ import annotations

import json
import sys
import threading

import pytest

from tests.selftest.conftest import cli
from workbook import bench, manifest

ROW_KEYS = {"design", "kind", "status", "note", "values", "ratio"}
VALUE_KEYS = {"value", "min", "max", "spread", "n"}

#: Per problem: case id -> the metric keys and the designs (name prefixes) it must list.
EXPECTED = {
    "p01": {
        "throughput": ({"items_per_s", "wakeups_per_item"},
                       ["reference", "yours", "pitfall: wakeup per put", "janus.Queue",
                        "culsans.Queue"]),
        "ping_pong": ({"rt_median", "rt_p99"},
                      ["reference", "yours", "pitfall: wakeup per put", "janus.Queue",
                       "culsans.Queue"]),
    },
    "p02": {
        "cancel": ({"latency_median", "latency_p99"},
                   ["reference", "yours", "pitfall: polling every 10 ms",
                    "pitfall: polling every 100 ms", "flag only + polling every 10 ms",
                    "flag only + polling every 100 ms"]),
        "idle": ({"wakeups_per_s"},
                 ["reference", "yours", "pitfall: polling every 10 ms",
                  "pitfall: polling every 100 ms"]),
    },
    "p03": {
        f"capacity_{c}": ({"items_per_s"}, ["reference", "yours", "queue.Queue",
                                            "one Condition + notify_all"])
        for c in (1, 16, 1024)
    },
    "p04": {
        "done_futures": ({"ns_per_yield"},
                         ["reference", "yours", "pitfall: recursion on done Futures",
                          "tornado gen.coroutine", "asyncio async/await"]),
        "moment": ({"ns_per_yield"},
                   ["reference", "yours", "tornado gen.coroutine", "asyncio async/await"]),
        "cross_thread": ({"callbacks_per_s", "writes_per_callback"},
                         ["reference", "yours", "pitfall: wake on every add_callback",
                          "tornado IOLoop.add_callback"]),
    },
}


def bench_json(*args: str) -> dict:
    out = cli("bench", *args, "--quick", "--json", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("problem_id", sorted(EXPECTED))
def test_each_bench_runs_in_quick_mode_and_reports_every_promised_design(problem_id):
    doc = bench_json(problem_id)
    assert doc["problem"] == problem_id and doc["quick"] is True and doc["repetitions"] == 2
    assert {"python", "cpu", "cpus", "platform", "load_average"} <= set(doc["environment"])
    cases = {c["id"]: c for c in doc["cases"]}
    assert set(cases) == set(EXPECTED[problem_id])
    for case_id, (metrics, designs) in EXPECTED[problem_id].items():
        case = cases[case_id]
        assert metrics <= {m["key"] for m in case["metrics"]}, case_id
        assert case["primary"] in {m["key"] for m in case["metrics"]}
        names = [r["design"] for r in case["rows"]]
        assert len(names) == len(designs), names
        for name, prefix in zip(names, designs):
            assert name.startswith(prefix), (case_id, names)
        ref = next(r for r in case["rows"] if r["kind"] == "reference")
        base = ref["values"][case["primary"]]["value"]
        for row in case["rows"]:
            assert ROW_KEYS <= set(row)
            assert row["status"] in ("measured", "missing", "failed")
            if row["kind"] == "peer" and row["status"] != "measured":
                assert row["status"] == "missing" and "not installed" in row["note"], row
            if row["kind"] in ("reference", "pitfall", "design"):
                assert row["status"] == "measured", (case_id, row)
            if row["status"] == "measured":
                for key in metrics:
                    assert VALUE_KEYS <= set(row["values"][key]), (case_id, row)
                # No ratio only where the reference's figure is 0 (P02's idle wakeups).
                assert (row["ratio"][case["primary"]] is None) == (base == 0), row
        if base:
            assert ref["ratio"][case["primary"]] == pytest.approx(1.0)


def test_the_skeleton_row_says_not_implemented_and_the_rest_is_measured():
    doc = bench_json("p01")
    for case in doc["cases"]:
        yours = next(r for r in case["rows"] if r["kind"] == "yours")
        assert yours["design"].endswith("mine/p01_output_sink.py")
        assert yours["status"] == "failed" and "not implemented" in yours["note"]


def test_file_measures_the_given_solution_as_yours():
    problem = manifest.get("p03")
    alternate = problem.alternates_dir / "two_semaphores.py"
    doc = bench_json("p03", "--file", str(alternate))
    assert doc["file"] == str(alternate.resolve())
    for case in doc["cases"]:
        yours = next(r for r in case["rows"] if r["kind"] == "yours")
        assert yours["design"].endswith("two_semaphores.py")
        assert yours["status"] == "measured", yours
        assert yours["ratio"]["items_per_s"] is not None


def test_the_table_shows_designs_ratios_and_the_machine():
    out = cli("bench", "p04", "--quick", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for text in ("reference Runner", "tornado", "asyncio async/await", "× reference",
                 "1.00×", "CPU", "not a test"):
        assert text in out.stdout, text


def test_bench_usage_errors_exit_2():
    assert cli("bench").returncode == 2
    assert cli("bench", "p01", "--file", "/no/such/file.py").returncode == 2
    assert cli("bench", "p01", "--reps", "0").returncode == 2


def test_a_missing_peer_is_reported_in_its_row_not_a_crash(monkeypatch, capsys):
    from workbook.bench import p01
    for name in ("janus", "culsans"):
        monkeypatch.setitem(sys.modules, name, None)  # import now raises ImportError
    assert p01.main(["--quick", "--json", "--reps", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for case in doc["cases"]:
        rows = {r["design"]: r for r in case["rows"]}
        for peer in ("janus.Queue", "culsans.Queue"):
            assert rows[peer]["status"] == "missing"
            assert "not installed" in rows[peer]["note"] and "bench" in rows[peer]["note"]
        assert rows["reference"]["status"] == "measured"


# -- the shared machinery, on made-up designs ---------------------------------------------------

def _case(designs, measure, metrics=None):
    return bench.Case("c", "a made-up case",
                      metrics or [bench.Metric("x", "x", "", "higher")], "x", designs, measure)


def test_repetitions_alternate_in_a_rotated_order_and_give_median_and_spread():
    calls = []
    values = {"reference": iter([10.0, 30.0, 20.0]), "other": iter([5.0, 5.0, 5.0])}

    def measure(obj, design):
        calls.append(design.name)
        return {"x": next(values[design.name])}

    designs = [bench.Design("reference", "reference", lambda: object()),
               bench.Design("other", "design", lambda: object())]
    rows = bench.run_case(_case(designs, measure), 3, lambda text: None)
    assert calls == ["reference", "other", "other", "reference", "reference", "other"]
    ref, other = rows
    assert ref.values["x"]["value"] == 20.0
    assert (ref.values["x"]["min"], ref.values["x"]["max"]) == (10.0, 30.0)
    assert ref.values["x"]["spread"] == pytest.approx(0.5)
    assert other.ratio["x"] == pytest.approx(0.25) and ref.ratio["x"] == pytest.approx(1.0)


def test_latency_samples_are_pooled_for_median_and_p99():
    reps = iter([[float(i) for i in range(100)], [float(i) for i in range(100, 200)]])
    metrics = [bench.Metric("med", "median", "ms", "lower", source="lat"),
               bench.Metric("p99", "p99", "ms", "lower", source="lat", stat="p99")]
    designs = [bench.Design("reference", "reference", lambda: object())]
    case = bench.Case("c", "latencies", metrics, "med", designs,
                      lambda obj, design: {"lat": next(reps)})
    (row,) = bench.run_case(case, 2, lambda text: None)
    assert row.values["med"]["value"] == pytest.approx(99.5)
    assert row.values["p99"]["value"] == 198.0
    assert row.values["med"]["n"] == 200


def test_broken_skeleton_missing_and_hung_designs_are_reported_and_the_run_goes_on():
    release = threading.Event()

    def missing():
        raise bench.Missing("nopeer is not installed")

    def measure(obj, design):
        if design.name == "broken":
            raise ValueError("boom")
        if design.name == "skeleton":
            raise NotImplementedError
        if design.name == "hangs":
            return bench.run_in_thread(lambda: release.wait(30), 0.2, what="the hang")
        return {"x": 1.0}

    designs = [bench.Design("reference", "reference", lambda: object()),
               bench.Design("broken", "yours", lambda: object()),
               bench.Design("skeleton", "yours", lambda: object()),
               bench.Design("hangs", "design", lambda: object()),
               bench.Design("nopeer", "peer", missing),
               bench.Design("unloadable", "yours", lambda: 1 / 0)]
    try:
        rows = {r.design.name: r for r in bench.run_case(_case(designs, measure), 2,
                                                         lambda text: None)}
    finally:
        release.set()
    assert rows["reference"].status == "measured" and rows["reference"].values["x"]["n"] == 2
    assert rows["broken"].status == "failed" and "ValueError: boom" in rows["broken"].note
    assert "not implemented" in rows["skeleton"].note
    assert rows["hangs"].status == "failed" and "did not finish" in rows["hangs"].note
    assert rows["nopeer"].status == "missing" and "not installed" in rows["nopeer"].note
    assert rows["unloadable"].status == "failed" and "ZeroDivisionError" in rows["unloadable"].note
    assert all(rows[n].ratio["x"] is None for n in ("broken", "hangs", "nopeer"))
    # A design that hung may still hold threads and locks: later cases skip it.
    again = {r.design.name: r for r in bench.run_case(_case(designs, measure), 1,
                                                      lambda text: None)}
    assert again["hangs"].status == "failed" and "skipped: it hung" in again["hangs"].note
    assert again["reference"].status == "measured"


def test_sustain_repeats_a_short_scenario_and_sums_its_totals():
    runs = iter([{"seconds": 0.1, "items": 10}] * 5)
    assert bench.sustain(lambda: next(runs), 0.25) == {"seconds": pytest.approx(0.3),
                                                        "items": 30}
    assert bench.sustain(lambda: {"seconds": 2.0, "items": 7}, 0.25) == {"seconds": 2.0,
                                                                         "items": 7}


def test_figures_are_formatted_with_significant_digits_and_suffixes():
    assert bench.fmt(2_290_000) == "2.29M"
    assert bench.fmt(19_300) == "19.3k"
    assert bench.fmt(31.24) == "31.2"
    assert bench.fmt(0.0000731) == "0.0000731"
    assert bench.fmt(None) == "—"
    assert bench.fmt_ratio(0.0749) == "0.075×" and bench.fmt_ratio(0.69) == "0.69×"
    assert bench.fmt_ratio(415.2) == "415×" and bench.fmt_ratio(27.04) == "27.0×"


def test_a_failing_worker_ends_the_crew_wait_with_its_error_while_others_still_block():
    blocked, interrupted = threading.Event(), threading.Event()

    def fails():
        raise ValueError("put is broken")

    crew = bench.Crew([lambda: blocked.wait(30), fails], on_error=interrupted.set).start()
    try:
        with pytest.raises(ValueError, match="put is broken"):
            crew.wait(5)  # the blocked worker would turn this into Hung after 5 s
        assert interrupted.is_set()
    finally:
        blocked.set()


def test_a_crew_that_stays_blocked_is_reported_as_hung():
    blocked = threading.Event()
    crew = bench.Crew([lambda: blocked.wait(30)]).start()
    try:
        with pytest.raises(bench.Hung, match="still blocked"):
            crew.wait(0.05, what="the worker")
    finally:
        blocked.set()
