"""Chapter blocks, hints and timelines as HTML: markdown-it-py for the markdown, Pygments for
code.  The served pages and the static site use exactly these functions."""
from __future__ import annotations

import json
from functools import lru_cache
from html import escape

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from workbook import chapters, timelines
from workbook.run import UsageError

#: The chapter's own "# title" is demoted: the page's h1 is the problem card.
HEADING_SHIFT = 1


def _highlight(code: str, lang: str, _attrs) -> str:
    lang = (lang or "").strip().split()[0] if lang else ""
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    return highlight(code, lexer, HtmlFormatter(cssclass="highlight", wrapcode=True))


@lru_cache(maxsize=1)
def _md() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True, "highlight": _highlight})
    md.enable(["table", "strikethrough"])
    return md


def markdown(text: str) -> str:
    html = _md().render(text)
    # tables can be wider than a phone: let them scroll inside their own box
    return html.replace("<table>", '<div class="table-scroll" tabindex="0"><table>') \
               .replace("</table>", "</table></div>")


def inline(text: str) -> str:
    return _md().renderInline(text)


def python(code: str) -> str:
    return highlight(code, PythonLexer(), HtmlFormatter(cssclass="highlight", wrapcode=True))


def pygments_css() -> str:
    light = HtmlFormatter(style="default").get_style_defs(".highlight")
    dark = HtmlFormatter(style="monokai").get_style_defs(".highlight")
    return (light + "\n@media (prefers-color-scheme: dark) {\n" + dark + "\n}\n"
            ".highlight { background: var(--code-bg) !important; }\n")


def blocks(chapter: chapters.Chapter, items, *, fold_prefix: str = "fold",
           anchor_prefix: str = "", shift: int = HEADING_SHIFT) -> str:
    out: list[str] = []
    for i, block in enumerate(items):
        if isinstance(block, chapters.Markdown):
            out.append(markdown(block.text))
        elif isinstance(block, chapters.Heading):
            out.append(heading(block, anchor_prefix, shift))
        elif isinstance(block, chapters.TimelineRef):
            out.append(timeline(block.name))
        elif isinstance(block, chapters.PitfallDiff):
            out.append(pitfall_diff(chapter.problem, block.name))
        elif isinstance(block, chapters.Fold):
            out.append(f'<details class="fold"><summary>{inline(block.summary)}</summary>'
                       f'<div class="fold-body">'
                       f'{blocks(chapter, block.blocks, fold_prefix=f"{fold_prefix}-{i}", anchor_prefix=anchor_prefix, shift=shift)}'
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
    head = "".join(f'<th scope="col">{escape(a)}</th>' for a in tl.actors)
    head += "".join(f'<th scope="col" class="tl-state">{escape(s)}</th>' for s in tl.state)
    rows = []
    for i, step in enumerate(tl.steps):
        cells = "".join(f"<td>{inline(c)}</td>" for c in step.do)
        cells += "".join(f'<td class="tl-state">{inline(c)}</td>' for c in step.state)
        note = (f'<tr class="tl-note-row" data-note="{i}"><td></td>'
                f'<td colspan="{len(tl.actors) + len(tl.state)}" class="tl-note">'
                f'{inline(step.note)}</td></tr>') if step.note else ""
        rows.append(f'<tr class="tl-step" data-step="{i}"><th scope="row">{escape(step.label)}'
                    f'</th>{cells}</tr>{note}')
    steps_json = [{"label": s.label, "do": [inline(c) for c in s.do],
                   "state": [inline(c) for c in s.state], "note": inline(s.note)}
                  for s in tl.steps]
    data = escape(json.dumps({"actors": list(tl.actors), "state": list(tl.state),
                              "steps": steps_json}), quote=True)
    intro = f'<div class="tl-intro">{markdown(tl.intro)}</div>' if tl.intro else ""
    title = escape(tl.title)
    return f"""<figure class="timeline" id="timeline-{escape(name)}" data-timeline="{data}"
  role="group" aria-roledescription="timeline" aria-label="Timeline: {title}" tabindex="0">
<figcaption>Timeline: {title}</figcaption>
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
    code = highlight(diff, get_lexer_by_name("diff"),
                     HtmlFormatter(cssclass="highlight diff", wrapcode=True))
    return (f'<figure class="pitfall-diff" aria-label="pitfall {escape(name)}">'
            f'<figcaption>Pitfall <code>{escape(name)}</code>: the change from the reference'
            f'</figcaption>{markdown(why) if why else ""}{code}</figure>')
