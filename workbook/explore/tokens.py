"""The replay token: one scenario (plain, JSON-able data with its schedule's seed) and the
problem it belongs to, as a short copy-and-paste string.  The same for every problem; each
problem's explorer turns the data back into its own scenario type."""
from __future__ import annotations

import base64
import json
import zlib
from dataclasses import MISSING, asdict, fields
from typing import Any

PREFIX = "x1."


def encode(problem: str, scenario: Any) -> str:
    """``scenario`` is a dataclass of plain data; fields still at their default are left out
    (a shorter token: decoding gives them back)."""
    data = json.dumps({"p": problem, "s": _changed(scenario)}, separators=(",", ":"))
    return PREFIX + base64.urlsafe_b64encode(zlib.compress(data.encode(), 9)).decode().rstrip("=")


def _changed(scenario: Any) -> dict[str, Any]:
    out = asdict(scenario)
    for f in fields(scenario):
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        if default is not MISSING and out[f.name] == default and f.name != "version":
            del out[f.name]
    return out


def decode(text: str) -> tuple[str, dict[str, Any]]:
    """The problem and the scenario's fields a token carries; ValueError if it is not one."""
    text = text.strip()
    if not text.startswith(PREFIX):
        raise ValueError("not an exploration replay token (they start with 'x1.')")
    body = text[len(PREFIX):]
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        data = json.loads(raw)
        problem, fields = data["p"], data["s"]
    except (ValueError, TypeError, KeyError, zlib.error) as exc:
        raise ValueError(f"the replay token is damaged ({exc})") from None
    if not isinstance(problem, str) or not isinstance(fields, dict):
        raise ValueError("the replay token is damaged (not a scenario)")
    return problem, fields
