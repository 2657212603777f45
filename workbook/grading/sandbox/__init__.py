"""The sandbox a graded run happens in, one module a job.

The grader's side: ``stage`` (the files a run sees), ``uids`` (a uid of its own per run
slot), ``cgroups`` (memory, tasks and CPU of the whole run), ``command`` (bubblewrap or the
trampoline around the run), ``runner`` (start it, watch it, end it), ``channels`` (the report
pipe and the output, read as they come), ``outside`` (what the grader sees of the run from
outside, compared with what it reported), ``procs`` (what it left behind) and ``isolation``
(which of the modes this machine allows, proved by a probe run).

The run's side: ``trampoline`` (pre-exec isolation and the seccomp filter), ``launch`` (the
audit hook, ``guard``, first, then the ``judge``, which holds the key and signs every record)
and ``reporter`` (a pytest plugin handing the harness's records to the judge).
"""


class IsolationError(RuntimeError):
    """The sandbox cannot keep learner code away from what it must not see."""
