"""The stuck detector: decides "nothing can move" from the state of the process (per-thread
CPU clocks and kernel state), not from waiting out a bound.  Layers, lowest first: ``code``,
``procfs``, ``frames``, ``model``, ``observe``, ``decide``, ``explain``, ``detector``.
Nothing here imports ``workbook.testkit``."""
