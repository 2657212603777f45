"""A learner file that hangs while it is imported is reported like a hung test: at once,
with its line and what it is doing (issue 23.1), not after the run's whole time limit."""
from __future__ import annotations

import re
import textwrap
import threading

import pytest

from workbook import manifest
from workbook.run import run_check
from workbook.stuck.importing import ImportWatch

P01 = manifest.get("p01")

HANGS = {
    "spin": ("""
        import threading

        count = 0
        while True:
            count += 1
        """, "spinning at", (4, 5)),
    "loop_never_ends": ("""
        import asyncio

        async def demo():
            never = asyncio.Event()
            await never.wait()

        asyncio.run(demo())
        """, "its event loop has nothing left to run", (7,)),
    "coroutine_blocks": ("""
        import asyncio
        import threading

        async def demo():
            lock = threading.Lock()
            with lock:
                lock.acquire()

        asyncio.run(demo())
        """, "waiting for a lock it holds itself", (7,)),
}


@pytest.mark.parametrize("name", sorted(HANGS))
def test_a_hang_at_import_is_reported_with_its_line_long_before_the_time_limit(
        tmp_path, name):
    source, said, lines = HANGS[name]
    learner = tmp_path / "p01_output_sink.py"
    learner.write_text(textwrap.dedent(source).lstrip())
    result = run_check(P01, learner)
    assert result.import_error is not None, result.output
    assert "importing the file did not finish" in result.import_error
    assert said in result.import_error, result.import_error
    assert any(re.search(rf"p01_output_sink\.py:{line}\b", result.import_error)
               for line in lines), \
        result.import_error
    # Every checkpoint carries the one import error, none "did not finish".
    assert {cp.message for cp in result.checkpoints} == {result.import_error}
    assert not result.incomplete
    if name == "loop_never_ends":  # and where the coroutine waits
        assert "waits at" in result.import_error and ".py:5 in demo()" in result.import_error
    # Reported by the watch, not by the run's wall-clock limit (90 s for P01).
    assert result.seconds < P01.time_limit / 3


def test_the_watch_says_nothing_about_an_import_that_finishes(tmp_path):
    learner = tmp_path / "quick.py"
    learner.write_text("import time\n\ndef work():\n    time.sleep(0.3)\n")
    namespace: dict = {}
    exec(compile(learner.read_text(), str(learner), "exec"), namespace)
    said: list[str] = []
    watch = ImportWatch(str(learner), said.append, patience=0.05, give_up=0.1)
    watch.start()
    namespace["work"]()  # asleep in the kernel at a learner line, but it returns
    finished = watch.finish()
    watch.thread.join(5)
    # It may or may not have called a 0.3 s sleep a hang (the patience is tiny here); what
    # matters is that it reports at most once and that finish() says whether it did.
    assert finished == (not said) and len(said) <= 1


def test_a_blocked_thread_is_named_asleep_in_time_sleep_with_its_line(tmp_path):
    learner = tmp_path / "sleepy.py"
    learner.write_text("import time\n\ndef work(done):\n    while not done.is_set():\n"
                       "        time.sleep(0.05)\n")
    namespace: dict = {}
    exec(compile(learner.read_text(), str(learner), "exec"), namespace)
    said: list[str] = []
    got = threading.Event()
    done = threading.Event()

    def report(sentence: str) -> None:
        said.append(sentence)
        got.set()
        done.set()

    def body() -> None:
        watch = ImportWatch(str(learner), report, patience=0.2, give_up=30)
        watch.start()
        namespace["work"](done)
        watch.finish()

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    assert got.wait(10), "the watch never reported a thread that sleeps forever"
    worker.join(5)
    assert len(said) == 1 and "asleep in time.sleep" in said[0], said
    assert "sleepy.py:5" in said[0], said
