"""Interleaving timelines: one structured source per timeline, ``book/timelines/<name>.toml``.

A chapter includes one with a line of its own, ``<!-- timeline: p01-lost-wakeup -->``; the
terminal's ``book`` renders it as a table, the web as a step-through widget.  The format::

    title = "The lost wakeup"
    intro = "markdown shown above (optional)"
    actors = ["consumer (loop thread)", "producer thread"]
    state = ["flag", "event", "queue", "wakeups"]
    [[steps]]
    label = "t0"
    do = ["previous call returned `['a']` without arming", ""]   # one cell per actor
    state = ["up", "set", "empty", "1"]                          # one cell per state column
    note = "optional markdown explaining this step"

Cells are inline markdown; an empty string is an empty cell.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from workbook import ROOT

TIMELINES_DIR = ROOT / "book" / "timelines"
NAME = re.compile(r"p\d\d-[a-z0-9]+(?:-[a-z0-9]+)*")


class TimelineError(ValueError):
    """A timeline file is missing, malformed or contradicts itself."""


@dataclass(frozen=True)
class Step:
    label: str
    do: tuple[str, ...]
    state: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    name: str
    title: str
    intro: str
    actors: tuple[str, ...]
    state: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def problem(self) -> str:
        return self.name.split("-", 1)[0]


def path_of(name: str, directory: Path | None = None) -> Path:
    return (directory or TIMELINES_DIR) / f"{name}.toml"


def _strings(value: object, where: str, field: str, length: int | None = None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TimelineError(f"{where}: {field!r} must be a list of strings")
    if length is not None and len(value) != length:
        raise TimelineError(f"{where}: {field!r} has {len(value)} cells, expected {length}")
    return tuple(value)


def _text(data: dict, key: str, where: str, *, required: bool) -> str:
    if key not in data:
        if required:
            raise TimelineError(f"{where}: missing field {key!r}")
        return ""
    if not isinstance(data[key], str):
        raise TimelineError(f"{where}: field {key!r} must be a string")
    return data[key]


def parse(data: dict, name: str) -> Timeline:
    """Validate one decoded timeline document."""
    where = f"timeline {name}"
    known = {"title", "intro", "actors", "state", "steps"}
    if set(data) - known:
        raise TimelineError(f"{where}: unknown fields {sorted(set(data) - known)}")
    actors = _strings(data.get("actors"), where, "actors")
    if not actors:
        raise TimelineError(f"{where}: at least one actor is needed")
    state = _strings(data.get("state", []), where, "state")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise TimelineError(f"{where}: at least one [[steps]] entry is needed")
    steps = []
    for i, raw in enumerate(raw_steps, 1):
        at = f"{where} step {i}"
        if not isinstance(raw, dict):
            raise TimelineError(f"{at}: must be a table")
        if set(raw) - {"label", "do", "state", "note"}:
            raise TimelineError(f"{at}: unknown fields {sorted(set(raw) - {'label', 'do', 'state', 'note'})}")
        steps.append(Step(
            label=_text(raw, "label", at, required=True),
            do=_strings(raw.get("do"), at, "do", len(actors)),
            state=_strings(raw.get("state", [] if not state else None), at, "state",
                           len(state)),
            note=_text(raw, "note", at, required=False),
        ))
        if not any(steps[-1].do) and not steps[-1].note:
            raise TimelineError(f"{at}: nobody does anything and there is no note")
    return Timeline(name=name, title=_text(data, "title", where, required=True),
                    intro=_text(data, "intro", where, required=False),
                    actors=actors, state=state, steps=tuple(steps))


def load(name: str, directory: Path | None = None) -> Timeline:
    """The timeline ``name`` (e.g. ``p01-lost-wakeup``); ``TimelineError`` if it is bad."""
    if not NAME.fullmatch(name):
        raise TimelineError(f"timeline name {name!r} must look like p01-some-slug")
    path = path_of(name, directory)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise TimelineError(f"no timeline {name!r} ({path} does not exist)") from None
    except tomllib.TOMLDecodeError as exc:
        raise TimelineError(f"timeline {name}: {exc}") from None
    return parse(data, name)


def names(directory: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (directory or TIMELINES_DIR).glob("p*.toml"))


# -- converting a markdown table into the format (used once per table, kept for authors) ----

def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def from_table(lines: list[str], title: str, n_actors: int, *, intro: str = "") -> dict:
    """A timeline document from a markdown table ``| step | actor... | state... |``."""
    head, _rule, *rows = [line for line in lines if line.strip()]
    columns = _cells(head)
    actors = columns[1:1 + n_actors]
    state = columns[1 + n_actors:]
    steps = []
    for row in rows:
        cells = _cells(row)
        if len(cells) != len(columns):
            raise TimelineError(f"row {row!r} has {len(cells)} cells, expected {len(columns)}")
        steps.append({"label": cells[0], "do": cells[1:1 + n_actors],
                      "state": cells[1 + n_actors:]})
    return {"title": title, "intro": intro, "actors": actors, "state": state, "steps": steps}


def dumps(doc: dict) -> str:
    """TOML text for a timeline document (strings and lists of strings only)."""
    def s(v: str) -> str:
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string

    def arr(vs: list[str]) -> str:
        return "[" + ", ".join(s(v) for v in vs) + "]"

    out = [f"title = {s(doc['title'])}"]
    if doc.get("intro"):
        out.append(f"intro = {s(doc['intro'])}")
    out.append(f"actors = {arr(doc['actors'])}")
    out.append(f"state = {arr(doc.get('state', []))}")
    for step in doc["steps"]:
        out += ["", "[[steps]]", f"label = {s(step['label'])}", f"do = {arr(step['do'])}",
                f"state = {arr(step.get('state', []))}"]
        if step.get("note"):
            out.append(f"note = {s(step['note'])}")
    return "\n".join(out) + "\n"
