"""Chapter blocks, hints and timelines as HTML: markdown-it-py for the markdown, Pygments for
code.  The served pages and the static site use exactly these functions."""
from __future__ import annotations

import json
from functools import lru_cache
from html import escape

from markdown_it import MarkdownIt
from mdit_py_plugins.footnote import footnote_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from workbook import chapters, timelines
from workbook.run import UsageError

#: The chapter's own "# title" is demoted: the page's h1 is the problem card.
HEADING_SHIFT = 1


def code_block(code: str, lexer, css: str = "highlight") -> str:
    """One code block: a single ``<pre class="highlight"><code>`` holding Pygments' spans.
    (Starting with ``<pre`` tells markdown-it not to wrap it in a second ``<pre><code>``.)"""
    spans = highlight(code, lexer, HtmlFormatter(nowrap=True))
    lang = escape(lexer.aliases[0]) if getattr(lexer, "aliases", None) else "text"
    return f'<pre class="{escape(css)}"><code class="language-{lang}">{spans}</code></pre>'


def _highlight(code: str, lang: str, _attrs) -> str:
    lang = (lang or "").strip().split()[0] if lang else ""
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    return code_block(code, lexer)


@lru_cache(maxsize=2)
def _md(in_chapter: bool = False) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True, "highlight": _highlight})
    md.enable(["table", "strikethrough"])
    md.use(footnote_plugin, inline=False)
    if in_chapter:
        # a chapter's notes are its Notes block (chapters.parse) and its blocks are rendered
        # one by one: each render must not append the plugin's own list of notes
        md.disable("footnote_tail")
    return md


def footnote_env(chapter: chapters.Chapter, prefix: str = "") -> dict:
    """The markdown-it env that makes ``[^label]`` a link to the chapter's note."""
    return {"docId": f"{prefix}{chapter.problem}",
            "footnotes": {"refs": {f":{n.label}": n.number - 1 for n in chapter.footnotes},
                          "list": {n.number - 1: {"label": n.label, "count": 0}
                                   for n in chapter.footnotes}}}


def _note_id(env: dict, number: int, kind: str = "fn") -> str:
    return f"{kind}-{env['docId']}-{number}"


def notes(items, env: dict) -> str:
    lis = "".join(f'<li id="{escape(_note_id(env, n.number))}" class="footnote-item">'
                  f'{markdown(n.text)}<a href="#{escape(_note_id(env, n.number, "fnref"))}" '
                  f'class="footnote-backref" aria-label="back to the text">↩</a></li>'
                  for n in items)
    return f'<section class="footnotes" aria-label="Notes"><ol>{lis}</ol></section>'


def markdown(text: str, env: dict | None = None) -> str:
    html = _md(env is not None).render(text, env if env is not None else {})
    # tables can be wider than a phone: let them scroll inside their own box
    return html.replace("<table>", '<div class="table-scroll" tabindex="0"><table>') \
               .replace("</table>", "</table></div>")


def inline(text: str) -> str:
    return _md().renderInline(text)


def python(code: str) -> str:
    return code_block(code, PythonLexer())


def pygments_css() -> str:
    light = HtmlFormatter(style="default").get_style_defs(".highlight")
    dark = HtmlFormatter(style="monokai").get_style_defs(".highlight")
    return (light + "\n@media (prefers-color-scheme: dark) {\n" + dark + "\n}\n"
            ".highlight { background: var(--code-bg) !important; }\n")


def blocks(chapter: chapters.Chapter, items, *, fold_prefix: str = "fold",
           anchor_prefix: str = "", shift: int = HEADING_SHIFT, env: dict | None = None) -> str:
    if env is None:
        env = footnote_env(chapter, anchor_prefix)
        items = list(items)
        if chapter.footnotes and not any(isinstance(b, chapters.Notes) for b in items):
            shown = chapter.notes_for(items)  # a section alone: its own notes at its end
            if shown:
                items.append(chapters.Notes(shown, 0))
    out: list[str] = []
    for i, block in enumerate(items):
        if isinstance(block, chapters.Markdown):
            out.append(markdown(block.text, env))
        elif isinstance(block, chapters.Notes):
            out.append(notes(block.notes, env))
        elif isinstance(block, chapters.Heading):
            out.append(heading(block, anchor_prefix, shift))
        elif isinstance(block, chapters.TimelineRef):
            out.append(timeline(block.name))
        elif isinstance(block, chapters.PitfallDiff):
            out.append(pitfall_diff(chapter.problem, block.name))
        elif isinstance(block, chapters.Fold):
            out.append(f'<details class="fold"><summary>{inline(block.summary)}</summary>'
                       f'<div class="fold-body">'
                       f'{blocks(chapter, block.blocks, fold_prefix=f"{fold_prefix}-{i}", anchor_prefix=anchor_prefix, shift=shift, env=env)}'
                       f'</div></details>')
    return "\n".join(out)


def heading(h: chapters.Heading, prefix: str = "", shift: int = HEADING_SHIFT) -> str:
    level = min(h.level + shift, 6)
    anchor, slug = prefix + h.anchor, prefix + h.slug
    alias = f'<span id="{escape(slug)}"></span>' if slug != anchor else ""
    return (f'<h{level} id="{escape(anchor)}">{alias}{inline(h.text)} '
            f'<a class="anchor" href="#{escape(anchor)}" aria-label="link to this section">#</a>'
            f'</h{level}>')


def timeline(name: str) -> str:
    """A step-through widget; without JavaScript every step shows in one table."""
    try:
        tl = timelines.load(name)
    except timelines.TimelineError as exc:
        return f'<p class="error">timeline {escape(name)}: {escape(str(exc))}</p>'
    steps = [{"label": s.label, "do": s.do, "state": s.state, "note": s.note} for s in tl.steps]
    intro = f'<div class="tl-intro">{markdown(tl.intro)}</div>' if tl.intro else ""
    return _figure(f"timeline-{name}", f"Timeline: {tl.title}", intro, tl.actors, tl.state,
                   steps, inline)


def counterexample(tl: dict, fig_id: str) -> str:
    """A failing run found by an explorer (``records.cap_timeline``'s structure) as the same
    widget as the book's timelines.  Its cells are the learner's source lines and the
    values of their calls: shown as text (escaped), never read as markdown."""
    cut = tl.get("cut") or 0
    intro = (f'<p class="muted">Its first {len(tl["steps"])} steps are shown ({cut} more: '
             'the whole run is in the message above).</p>') if cut else ""
    return _figure(fig_id, f"The failing run: {tl.get('title') or 'step by step'}", intro,
                   tl["actors"], tl["state"], tl["steps"], escape)


def _figure(fig_id: str, caption: str, intro: str, actors, state, steps: list[dict],
            cell) -> str:
    """The step-through figure: every step in one table (what shows without JavaScript),
    and the steps as JSON for ``initTimeline`` in app.js; ``cell`` renders one cell."""
    head = "".join(f'<th scope="col">{escape(a)}</th>' for a in actors)
    head += "".join(f'<th scope="col" class="tl-state">{escape(s)}</th>' for s in state)
    rows = []
    for i, step in enumerate(steps):
        cells = "".join(f"<td>{cell(c)}</td>" for c in step["do"])
        cells += "".join(f'<td class="tl-state">{cell(c)}</td>' for c in step["state"])
        note = (f'<tr class="tl-note-row" data-note="{i}"><td></td>'
                f'<td colspan="{len(actors) + len(state)}" class="tl-note">'
                f'{cell(step["note"])}</td></tr>') if step.get("note") else ""
        rows.append(f'<tr class="tl-step" data-step="{i}"><th scope="row">'
                    f'{escape(str(step["label"]))}</th>{cells}</tr>{note}')
    steps_json = [{"label": str(s["label"]), "do": [cell(c) for c in s["do"]],
                   "state": [cell(c) for c in s["state"]], "note": cell(s.get("note") or "")}
                  for s in steps]
    data = escape(json.dumps({"actors": list(actors), "state": list(state),
                              "steps": steps_json}), quote=True)
    shown = escape(caption)
    return f"""<figure class="timeline" id="{escape(fig_id)}" data-timeline="{data}"
  role="group" aria-roledescription="timeline" aria-label="{shown}" tabindex="0">
<figcaption>{shown}</figcaption>
{intro}
<div class="tl-controls" hidden>
  <button type="button" class="tl-prev" aria-label="previous step">◀ Previous</button>
  <span class="tl-pos" aria-live="polite"></span>
  <button type="button" class="tl-next" aria-label="next step">Next ▶</button>
  <span class="tl-keys">or ← → keys</span>
</div>
<div class="tl-now" hidden aria-live="polite"></div>
<div class="table-scroll" tabindex="-1"><table class="tl-table">
<thead><tr><th scope="col">step</th>{head}</tr></thead>
<tbody>{''.join(rows)}</tbody></table></div>
</figure>"""


def pitfall_diff(problem_id: str, name: str) -> str:
    try:
        why, diff = chapters.read_pitfall_diff(problem_id, name)
    except FileNotFoundError:
        return (f'<p class="note">The diff of pitfall <code>{escape(name)}</code> is not '
                f'shipped yet (<code>./check.sh {problem_id} --pitfall {escape(name)}'
                f' --show</code>).</p>')
    except UsageError as exc:
        return f'<p class="error">pitfall {escape(name)}: {escape(str(exc))}</p>'
    code = code_block(chapters.changed_lines(diff), get_lexer_by_name("diff"), "highlight diff")
    return (f'<details class="fold pitfall-diff" aria-label="pitfall {escape(name)}">'
            f'<summary>Pitfall <code>{escape(name)}</code>: the lines it changes in the '
            f'reference</summary><div class="fold-body">{markdown(why) if why else ""}{code}'
            f'<p class="muted">The whole diff: <code>./check.sh {escape(problem_id)} '
            f'--pitfall {escape(name)} --show</code></p></div></details>')
