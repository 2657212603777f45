"""The sandbox: ``trampoline`` (pre-exec isolation), ``runner`` (the grader side), ``reporter`` (in the run)."""
