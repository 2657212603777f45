"""The errors the harness reports to people, in one module every layer may import.

``UsageError`` and its kinds end a command with one short line and exit code 2; they sit
here, below every other module, so that raising one never imports the runner.
"""
from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad input from the command line: exit code 2."""


class VariantError(UsageError):
    """A variant's diff is malformed or no longer applies to the reference."""


class ManifestError(ValueError):
    """A manifest file is missing a field or contradicts itself."""


class ReportError(ValueError):
    """A report record that is not part of the report's schema (or of another version)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one short line (exit code 2), not the usage block:
    every command's parser is one of these."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (--help for usage)")
