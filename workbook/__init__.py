"""The concurrency workbook harness: manifests, checks, hints, grading."""
from pathlib import Path

#: The repository root: manifests, learner files, solutions, hints and tests hang off it.
ROOT = Path(__file__).resolve().parent.parent
