"""The concurrency workbook harness: manifests, checks, hints, grading."""
from __future__ import annotations

from pathlib import Path

#: The repository root: manifests, learner files, solutions, hints and tests hang off it.
ROOT = Path(__file__).resolve().parent.parent


def shown_path(path: str | Path) -> str:
    """``path`` relative to the repository when it lies inside it (as messages show it)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
