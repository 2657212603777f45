"""What the grader saw of a run from outside, compared with what the run reported.

Each record carries the judge's stamp: the process's monotonic clock (the machine's, the
same the grader reads) and its CPU seconds when the record left.  The grader adds when it
read the record and, from the run's cgroup, how much CPU every process and thread of the
run had used by then.  Each comparison below holds for every honest run, however loaded the
machine, because it only ever bounds a figure by one that must be at least as large:

- a record cannot leave before the run started, or after the grader read it;
- the clock and the CPU time of a process never run backwards from one record to the next;
- a process cannot have used more CPU than its whole run had used when the grader looked;
- a test cannot have lasted longer than the time between the record before it (the previous
  test's, or the collection's) and its own;
- all the tests reported so far cannot have lasted longer than the run had been going.

The first record that breaks one of these is where the report stops being believed (the row
is ``tampered``).  What this cannot see: a report whose figures are small and consistent
(see the README's "What the report can and cannot prove").
"""
from __future__ import annotations

from workbook.grading import protocol

#: Seconds of slack for the clocks: the harness rounds a test's duration to 1 ms.
CLOCK_SLACK = 0.01
#: Seconds of slack for the CPU counters (the cgroup's is updated at the scheduler's ticks).
CPU_SLACK = 0.1


def check(records: list[protocol.Record], stamps: list[protocol.Stamp],
          started: float) -> tuple[int, str] | None:
    """``(index, why)`` of the first record the outside view makes impossible, or None."""
    before: protocol.Stamp | None = None  # the previous record's stamp
    bracket: protocol.Stamp | None = None  # the last record that is not a note
    claimed = 0.0  # the reported tests' seconds so far
    for index, (record, stamp) in enumerate(zip(records, stamps)):
        why = None
        if stamp.clock < started - CLOCK_SLACK:
            why = "a record stamped before the run started"
        elif stamp.arrived and stamp.clock > stamp.arrived + CLOCK_SLACK:
            why = "a record stamped after the grader read it"
        elif before is not None and stamp.clock < before.clock - CLOCK_SLACK:
            why = "a record stamped before the one ahead of it"
        elif before is not None and stamp.cpu < before.cpu - CPU_SLACK:
            why = "the process's CPU time ran backwards"
        elif stamp.run_cpu is not None and stamp.cpu > stamp.run_cpu + CPU_SLACK:
            why = (f"the process reported {stamp.cpu:.2f} s of CPU where the whole run had "
                   f"used {stamp.run_cpu:.2f} s")
        elif isinstance(record, protocol.TestDone):
            claimed += record.seconds
            window = stamp.clock - bracket.clock if bracket is not None else None
            if window is not None and record.seconds > window + CLOCK_SLACK:
                why = (f"{record.nodeid} reported {record.seconds:.3f} s where "
                       f"{window:.3f} s passed around it")
            elif stamp.arrived and claimed > stamp.arrived - started + CLOCK_SLACK:
                why = (f"the tests reported {claimed:.2f} s in all where the run had been "
                       f"going {stamp.arrived - started:.2f} s")
        if why is not None:
            return index, why
        before = stamp
        if not isinstance(record, protocol.Note):
            bracket = stamp
    return None
