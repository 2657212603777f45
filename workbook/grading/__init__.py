"""Instructor grading: the same acceptance sets a learner runs, in a sandbox, for a class.

The data path, one module a step::

    discovery ──► batch ──► judging ──► sandbox.runner ──(trampoline.py)──► pytest
     folders      plan,      trusted        stage, run,                    + harness plugin
     → files      --jobs     collection,    watch, sweep                   + sandbox.reporter
                  ▲          honest order                                      │
                  │          ▲                                                 │
                  │          └──────── protocol: typed, signed records ◄───────┘
                  └──► gradebook (one Entry per pair) ──► exports (CSV, Gradescope,
                                                          insight, similarity), bundle

``protocol`` is the one definition of what a run reports; the in-process ``reporter`` and the
grader's ``sandbox.channels``/``judging`` both import it.  ``sandbox``'s own docstring lists
its modules (stage, uids, cgroups, command, runner, channels, procs, isolation).
"""
