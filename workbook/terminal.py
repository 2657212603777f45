"""The one ``Console`` every command prints to (and its twin on stderr for errors)."""
from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
