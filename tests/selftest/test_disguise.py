"""What the kernel says of a thread is read through the id the thread recorded itself, in
harness code, before running anything of the submission: a submission that points its
threads' ``native_id`` at a decoy asleep in ``select()`` is judged as what it really is."""
from __future__ import annotations

from tests.selftest.grading import attacks
from workbook import manifest, variants
from workbook.run import run_check


def test_a_polling_queue_that_points_its_threads_at_a_decoy_fails_what_polling_fails(tmp_path):
    p03 = manifest.get("p03")
    path = tmp_path / f"{p03.module}.py"
    path.write_text(attacks.ATTACKS["disguised_poller"](p03))
    result = run_check(p03, path)
    failed = {cp.id for cp in result.checkpoints if cp.status != "passed"}
    polls = variants.get(p03, "wrong", "sleeps_instead_of_waiting")
    assert set(polls.fails) <= failed, sorted(failed)
    put_blocks = next(cp for cp in result.checkpoints if cp.id == "p03.put_blocks")
    assert "spins or polls" in (put_blocks.message or ""), put_blocks.message
