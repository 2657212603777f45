// The workbook's pages: timelines step by step, hints one level at a time, checks streamed.
// Plain JavaScript, no build step. The pages work without it (everything is shown).
"use strict";

window.__wb = { latencies: [], events: [] };

// The server's token arrives once, in the address's fragment (never sent to a server). It is
// kept in this origin's localStorage, which (unlike a cookie) other servers on 127.0.0.1
// never see, and sent with every change; the cookie only lets the browser read pages.
(function keepToken() {
  const m = /^#token=([^&]+)$/.exec(location.hash);
  if (!m) return;
  try { localStorage.setItem("workbook-token", decodeURIComponent(m[1])); } catch (e) { /* */ }
  history.replaceState(null, "", location.pathname + location.search);
})();
function token() {
  try { return localStorage.getItem("workbook-token") || ""; } catch (e) { return ""; }
}

function $(sel, root) { return (root || document).querySelector(sel); }
function $all(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }
function esc(s) {
  return String(s == null ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// -- timelines -------------------------------------------------------------------------------

function initTimeline(fig) {
  const data = JSON.parse(fig.dataset.timeline);
  const rows = $all("tr.tl-step", fig);
  const notes = $all("tr.tl-note-row", fig);
  const controls = $(".tl-controls", fig), now = $(".tl-now", fig);
  const prev = $(".tl-prev", fig), next = $(".tl-next", fig), pos = $(".tl-pos", fig);
  const n = data.steps.length;
  let i = 0;
  controls.hidden = false;
  now.hidden = false;
  fig.classList.add("tl-live");

  function show() {
    rows.forEach((r, k) => {
      r.classList.toggle("tl-current", k === i);
      r.classList.toggle("tl-future", k > i);
      if (k === i) r.setAttribute("aria-current", "step"); else r.removeAttribute("aria-current");
    });
    notes.forEach((r) => { r.classList.toggle("tl-future", Number(r.dataset.note) > i); });
    const s = data.steps[i];
    pos.textContent = `Step ${i + 1} of ${n}: ${s.label}`;
    let body = "";
    data.actors.forEach((a, k) => {
      body += `<tr class="tl-now-do"><th scope="row">${esc(a)}</th><td>${s.do[k] || "<span class=\"muted\">—</span>"}</td></tr>`;
    });
    data.state.forEach((name, k) => {
      const changed = i > 0 && data.steps[i - 1].state[k] !== s.state[k];
      body += `<tr class="tl-now-state${changed ? " changed" : ""}"><th scope="row">${esc(name)}</th><td>${s.state[k] || ""}${changed ? ' <span class="changed-mark">changed</span>' : ""}</td></tr>`;
    });
    now.innerHTML = `<table class="tl-now-table"><caption>At step ${esc(s.label)}</caption><tbody>${body}</tbody></table>` +
      (s.note ? `<p class="tl-now-note">${s.note}</p>` : "");
    const had = document.activeElement;
    prev.disabled = i === 0;
    next.disabled = i === n - 1;
    // A disabled button loses focus (to the page's start): keep it on the other button,
    // or on the figure when both are disabled.
    if (had === next && next.disabled) (prev.disabled ? fig : prev).focus();
    if (had === prev && prev.disabled) (next.disabled ? fig : next).focus();
    fig.dataset.step = String(i);
  }
  function go(k) { i = Math.max(0, Math.min(n - 1, k)); show(); }
  prev.addEventListener("click", () => go(i - 1));
  next.addEventListener("click", () => go(i + 1));
  fig.addEventListener("keydown", (e) => {
    if (e.target.closest("button") && (e.key === "Enter" || e.key === " ")) return;
    const map = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: n - 1 };
    if (e.key in map) { e.preventDefault(); go(map[e.key]); }
  });
  show();
}

// -- hints -----------------------------------------------------------------------------------

function enableNextHint(level) {
  const nextBtn = $(`#hint-L${level + 1} button.reveal`);
  if (nextBtn) nextBtn.disabled = false;
}

function initStaticHints() {
  // Without JavaScript every level is a <details> fold anyone can open. With it, a level
  // opens only after the one before it, so a reader meets the light spoiler first.
  const folds = $all("section.hint details.hint-fold");
  folds.forEach((fold, k) => {
    const summary = $("summary", fold);
    const locked = () => k > 0 && !folds[k - 1].dataset.opened;
    const mark = () => {
      summary.setAttribute("aria-disabled", locked() ? "true" : "false");
      fold.classList.toggle("locked", locked());
    };
    summary.addEventListener("click", (e) => { if (locked() && !fold.open) e.preventDefault(); });
    fold.addEventListener("toggle", () => {
      if (!fold.open) return;
      fold.dataset.opened = "1";
      folds.forEach((f) => f.dispatchEvent(new Event("wb-lock")));
    });
    fold.addEventListener("wb-lock", mark);
    mark();
  });
}

// -- copy buttons ----------------------------------------------------------------------------

function initCopyButtons(root) {
  // Progressive: the code is plain text in a <pre>; the button only saves selecting it.
  if (!navigator.clipboard) return;
  $all("pre.highlight, pre.command", root).forEach((pre) => {
    if (pre.dataset.copy) return;
    pre.dataset.copy = "1";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "copy";
    btn.textContent = "Copy";
    btn.setAttribute("aria-label", "copy this code");
    btn.addEventListener("click", async () => {
      const code = $("code", pre) || pre;
      try {
        await navigator.clipboard.writeText(code.innerText.replace(/\n$/, ""));
        btn.textContent = "Copied";
      } catch (e) {
        btn.textContent = "Select and copy";
      }
      setTimeout(() => { btn.textContent = "Copy"; }, 1500);
    });
    const wrap = document.createElement("div");
    wrap.className = "code-wrap";
    pre.parentNode.insertBefore(wrap, pre);
    wrap.appendChild(pre);
    wrap.appendChild(btn);
  });
}

async function post(url, body) {
  const res = await fetch(url, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Workbook-Token": token() },
    body: JSON.stringify(body || {}),
  });
  let doc = {};
  try { doc = await res.json(); } catch (e) { doc = { ok: false, message: res.statusText }; }
  doc.status = res.status;
  return doc;
}

function initServedHints(pid) {
  // Without this script a level not opened yet is a plain fold that the browser opens and
  // nobody records (recording takes the token, which only this script holds). With it, the
  // fold gives way to a button that opens the level in order and records it, like
  // ./check.sh hint: the level's text comes back from that POST, not from the fold.
  $all("section.hint").forEach((section) => {
    const btn = $("button.open-hint", section), fold = $("details.hint-fold", section);
    if (!btn || !fold) return;
    const body = $(".hint-body", fold);
    body.innerHTML = "";
    body.hidden = true;
    fold.replaceWith(body);
    btn.hidden = false;
  });
  $all("button.open-hint").forEach((btn) => {
    btn.addEventListener("click", async () => {
      const level = Number(btn.dataset.level);
      btn.disabled = true;
      const doc = await post(`/${pid}/hint/${level}`);
      const body = $(`#hint-L${level}-body`);
      if (!doc.ok) { btn.disabled = false; body.hidden = false; body.innerHTML = `<p class="error">${esc(doc.message)}</p>`; return; }
      body.innerHTML = doc.html;
      body.hidden = false;
      body.setAttribute("tabindex", "-1");
      btn.remove();
      document.body.dataset.hintsSeen = String(doc.hints_seen);
      enableNextHint(level);
      body.querySelectorAll("figure.timeline").forEach(initTimeline);
      initCopyButtons(body);
      body.focus();
    });
  });
}

// -- checks ----------------------------------------------------------------------------------

const ICONS = { passed: "✓", failed: "✗", not_attempted: "·", pending: "·", running: "…" };
const WORDS = { passed: "passed", failed: "failed", not_attempted: "not attempted", pending: "not run", running: "running" };

function setCheckpoint(id, status, seconds) {
  const li = $(`#checklist li[data-checkpoint="${CSS.escape(id)}"]`);
  if (!li) return;
  li.dataset.status = status;
  $(".icon", li).textContent = ICONS[status] || "?";
  $(".state", li).textContent = WORDS[status] || status;
  $(".secs", li).textContent = seconds != null && status !== "running" ? `${Number(seconds).toFixed(2)}s` : "";
}

function setNotes(id, notes) {
  const li = $(`#checklist li[data-checkpoint="${CSS.escape(id)}"]`);
  if (!li) return;
  let box = $(".notes", li);
  if (!box) { box = document.createElement("span"); box.className = "notes muted"; $(".title", li).after(box); }
  box.innerHTML = (notes || []).map((n) => `<span class="note">${esc(n)}</span>`).join("");
}

// "Your output": what the learner's code printed, folded, as text (escaped), under a label
// that says whose it is, so nothing printed can pass for the checker's verdict.
function learnerOutput(o, alone, when) {
  const lines = o.text.replace(/\n$/, "").split("\n").length;
  const during = when || (alone ? "this check" : `“${esc(o.title)}”`);
  return `<details class="learner-output" data-checkpoint="${esc(o.checkpoint)}"><summary>Your output: what your code printed during ${during} (${lines} line${lines === 1 ? "" : "s"})</summary><pre class="learner-output-text"><code>${esc(o.text)}</code></pre></details>`;
}

// The result's view as the server built it (the terminal draws the same one): one panel per
// root cause, drawn as it is.
function renderDiagnoses(pid, doc) {
  const box = $("#diagnoses");
  // An import that failed has no panel: what the file printed meanwhile is shown alone.
  const printed = doc.blocker_output ? learnerOutput({checkpoint: "", title: "", text: doc.blocker_output}, true, "the import") : "";
  box.innerHTML = printed + doc.diagnoses.map((d) => {
    const ids = esc(d.checkpoints.join(" "));
    if (d.kind === "missing") {
      return `<section class="diagnosis missing" data-checkpoint="${esc(d.checkpoints[0])}" data-checkpoints="${ids}" aria-label="Diagnosis"><h3>${esc(d.title)}</h3></section>`;
    }
    const section = d.anchor ? `<a href="#${esc(d.anchor)}">book section “${esc(d.section_title)}”</a>` : `book section “${esc(d.section_title)}”`;
    const same = d.same_cause.length ? `<p><strong>Same cause in ${d.same_cause.length} checkpoints:</strong></p><ul class="same-cause">${d.same_cause.map((t) => `<li>${esc(t)}</li>`).join("")}</ul>` : "";
    return `<section class="diagnosis" data-checkpoint="${esc(d.checkpoints[0])}" data-checkpoints="${ids}" aria-label="Diagnosis: ${esc(d.title)}">
      <h3>${esc(d.title)}</h3>
      <p class="message">${esc(d.message)}</p>
      ${d.looks_like ? `<p><strong>Looks like:</strong> ${esc(d.looks_like)}</p>` : ""}
      ${same}
      <p><strong>Read:</strong> <a href="#hint-L${d.hint}" class="hint-link" data-level="${d.hint}">hint level ${d.hint}</a> · ${section}</p>
      ${d.timeline_html || ""}
      ${(d.outputs || []).map((o) => learnerOutput(o, d.checkpoints.length === 1)).join("")}
    </section>`;
  }).join("");
  // A failing run an explorer found, drawn by the server (its cells escaped): stepped
  // through like the book's timelines.
  $all("figure.timeline", box).forEach(initTimeline);
}

function initChecks(pid, data) {
  const runBtn = $("#run"), status = $("#run-status"), verdict = $("#verdict"), watch = $("#watch");
  watch.checked = !!data.watching;
  let running = false;

  function busy(on) {
    running = on;
    runBtn.textContent = on ? "Running…" : "Run checks";
    runBtn.setAttribute("aria-busy", on ? "true" : "false");
  }

  runBtn.addEventListener("click", async () => {
    const doc = await post(`/${pid}/run`);
    if (!doc.ok) { status.textContent = doc.message; status.dataset.kind = "refused"; }
  });
  watch.addEventListener("change", async () => {
    const doc = await post(`/${pid}/watch`, { on: watch.checked });
    watch.checked = !!doc.watching;
  });

  // A diagnosis's "hint level N" is the next level not opened yet (as the terminal says):
  // following it opens that level in place, recorded like ./check.sh hint; a level already
  // open is simply scrolled to.
  $("#diagnoses").addEventListener("click", (e) => {
    const link = e.target.closest("a.hint-link");
    if (!link) return;
    const opener = $(`#hint-L${Number(link.dataset.level)} .open-hint`);
    if (opener && !opener.disabled) { e.preventDefault(); opener.click(); }
  });

  const source = new EventSource(`/${pid}/events`);
  window.__wb.source = source;
  source.onmessage = (msg) => {
    const ev = JSON.parse(msg.data);
    const got = Date.now() / 1000;
    window.__wb.events.push({ ...ev, received_at: got });
    if (ev.type === "hello") {
      document.body.dataset.stream = "open";
      if (ev.running) busy(true);
      watch.checked = !!ev.watching;
      if (ev.cards) drawCards(ev.cards, pid);
      if (!ev.running && ev.last) drawLast(pid, ev.last);  // recorded since the page was made
    } else if (ev.type === "start") {
      busy(true);
      status.dataset.kind = "running";
      status.textContent = `Checking ${ev.file}${ev.why === "file saved" ? " (saved)" : ""}…`;
      verdict.textContent = "";
      verdict.className = "";
      $("#diagnoses").innerHTML = "";
      ev.checkpoints.forEach((id) => { setCheckpoint(id, "running"); setNotes(id, []); });
    } else if (ev.type === "checkpoint") {
      setCheckpoint(ev.id, ev.status, ev.seconds);
      if (ev.reported_at) window.__wb.latencies.push({ id: ev.id, run: ev.run, seconds: got - ev.reported_at });
    } else if (ev.type === "import_error") {
      status.textContent = ev.message;
    } else if (ev.type === "result") {
      drawLast(pid, ev);
      status.dataset.kind = "finished";
      status.textContent = (ev.skeleton ? "Nothing implemented yet." : `Checked ${ev.result.file.split("/").slice(-2).join("/")}.`) +
        (ev.advice ? ` ${ev.advice}` : "");
      document.body.dataset.lastRun = String(ev.run);
    } else if (ev.type === "last") {
      // A check recorded elsewhere (the terminal, another page): the last result now.
      if (!running) {
        drawLast(pid, ev);
        status.dataset.kind = "elsewhere";
        status.textContent = ev.source === "terminal"
          ? "A check in the terminal finished: its result is below."
          : "A check finished on another page: its result is below.";
      }
    } else if (ev.type === "progress") {
      drawCards(ev.cards, pid);
    } else if (ev.type === "error") {
      status.textContent = ev.message;
      status.dataset.kind = "error";
    } else if (ev.type === "idle") {
      busy(false);
    } else if (ev.type === "watch") {
      watch.checked = !!ev.on;
    }
  };
  source.onerror = () => { document.body.dataset.stream = "retrying"; };
}

// -- progress: the last recorded check, the marks of done -------------------------------------

// The last recorded check of this problem (the terminal's or a page's), with when and where
// it ran: the checklist, the verdict line and the panels, as the server describes it.
function drawLast(pid, last) {
  if (!last || !last.rows) return;
  last.rows.forEach((r) => { setCheckpoint(r.id, r.status, r.seconds); setNotes(r.id, r.notes); });
  const verdict = $("#verdict");
  verdict.textContent = last.line;
  verdict.className = (last.passed ? "verdict ok" : "verdict bad") + (last.blocker ? ` ${last.blocker}` : "");
  renderDiagnoses(pid, last);
  showDone(last);
  document.body.dataset.lastKey = JSON.stringify(last.key || null);
}

// A problem's progress as the server states it (card.live()): done or not, the status line
// (the same as ./check.sh status), the last-check line, "file changed since".
function showDone(card) {
  const m = $("#mark-done"), u = $("#undo-done"), st = $("#status"), line = $("#last-check");
  const done = card.state ? card.state !== "open" : !!card.done;
  if (m) m.hidden = done;
  if (u) u.hidden = !done;
  if (st && card.status) st.textContent = card.status;
  if (line && card.last_line) { line.textContent = card.last_line; line.classList.toggle("changed", !!card.changed); }
  const box = $("#card");
  if (box) { box.classList.toggle("is-done", done); box.classList.toggle("is-failed", card.state === "done_failed"); }
}

// Every problem's mark in the navigation (and its card on the index), updated in place.
function drawCards(cards, pid) {
  cards.forEach((c) => {
    const failed = c.state === "done_failed", label = failed ? "done, but the last check failed" : "done";
    const mark = $(`header.site li[data-problem="${CSS.escape(c.id)}"] .done-mark`);
    if (mark) {
      mark.hidden = !c.done;
      mark.textContent = failed ? "✓!" : "✓";
      mark.classList.toggle("failed", failed);
      mark.setAttribute("aria-label", label);
      mark.title = label;
    }
    const card = $(`li.card[data-problem="${CSS.escape(c.id)}"]`);
    if (card) {
      card.classList.toggle("is-done", c.done);
      card.classList.toggle("is-failed", failed);
      const st = $("dd.status", card);
      if (st) { st.textContent = c.status; st.dataset.status = c.done ? "done" : "open"; }
    }
    if (c.id === pid) showDone(c);
  });
}

function followProgress() {  // a page of no problem: the marks only
  const source = new EventSource("/events");
  window.__wb.source = source;
  source.onmessage = (msg) => {
    const ev = JSON.parse(msg.data);
    window.__wb.events.push({ ...ev, received_at: Date.now() / 1000 });
    if (ev.type === "hello") document.body.dataset.stream = "open";
    if (ev.cards) drawCards(ev.cards, null);
  };
}

// -- done / reference ------------------------------------------------------------------------

function initDone(pid) {
  const m = $("#mark-done"), u = $("#undo-done");
  if (m) m.addEventListener("click", async () => { const d = await post(`/${pid}/done`); if (d.ok) { showDone(d); u.focus(); } });
  if (u) u.addEventListener("click", async () => { const d = await post(`/${pid}/undo`); if (d.ok) { showDone(d); m.focus(); } });
}

function initReference(pid) {
  const btn = $("#show-anyway");
  if (!btn) return;
  const warn = $("#reference-warning");
  btn.addEventListener("click", () => { warn.hidden = false; btn.hidden = true; $("#show-confirm").focus(); });
  $("#show-cancel").addEventListener("click", () => { warn.hidden = true; btn.hidden = false; btn.focus(); });
  $("#show-confirm").addEventListener("click", async () => {
    const res = await fetch(`/${pid}/reference?anyway=1`, { credentials: "same-origin" });
    const doc = await res.json();
    warn.hidden = true;
    $("#reference-code").innerHTML = doc.ok ? doc.html : `<p class="error">${esc(doc.message)}</p>`;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $all("figure.timeline").forEach(initTimeline);
  initCopyButtons(document);
  const mode = document.body.dataset.mode, pid = document.body.dataset.problem;
  if (!pid) { if (mode === "serve") followProgress(); return; }
  if (mode === "static") { initStaticHints(); return; }
  const data = JSON.parse($("#page-data").textContent);
  initServedHints(pid);
  if (data.last) drawLast(pid, data.last);
  initChecks(pid, data);
  initDone(pid);
  initReference(pid);
});
