"""Exploration: search a problem's contract instead of sampling it (issue 24).

    scenario (Hypothesis: threads × operations × edge values, one seed)
        │
        ▼
    controlled run (sched + prims: one thread at a time, switching at locks, waits, the
        │           clock and, optionally, the learner's lines; a virtual clock; exceptions
        │           and spurious wake-ups injected inside waits)
        ▼
    oracle (linearizability against a sequential model; nothing asleep that could go on;
        │   deadlines kept; taken items not kept alive)
        ▼
    shortest counterexample ──► timeline (one column per thread) + replay token

Why our own scheduler and not ``frontrun`` (PyPI, 0.7.0, evaluated first): its ``explore``
must run under its ``frontrun`` command wrapper (an LD_PRELOAD library), which the learner's
``./check.sh`` would have to impose on pytest; its random strategy with the virtual clock
cost ~140 ms a run on this loaded box (50 runs of a 3-thread P03 scenario: 7.1 s), and
random preemption rarely reaches the schedules that matter here (two waiters of one role
parked before a wake-up, a notify at the instant a deadline passes).  ``ploom`` and
``interleave-test`` do not install from the package index available here.  A cooperative
scheduler that runs each thread until it blocks, over controlled stand-ins for
``threading``/``time`` put into the learner module's namespace, reaches those schedules by
construction, replays exactly from a seed, and costs a few milliseconds a run.

Modules: ``sched`` (scheduler, virtual clock, faults), ``prims`` (the stand-ins and the
patch), ``scenario`` (scenarios, Hypothesis strategy, replay token), ``oracle``
(linearizability), ``timeline`` (the counterexample as text), ``p03`` (the P03 model, runs,
``explore`` and ``replay``), ``p04`` and its ``p04_*`` modules (P04: programs run on the
learner's loop and on a model of the contract, with ``io``'s selectors and waker).
"""
