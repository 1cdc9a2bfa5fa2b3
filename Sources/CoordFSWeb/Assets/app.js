// coordfs web: the page. Plain JavaScript, no library. Everything from the mount (names, contents,
// executables) reaches the document as text nodes only (textContent, never innerHTML), so a file
// named <img src=x onerror=alert(1)> shows as those characters.
"use strict";

const TOKEN = document.querySelector('meta[name="coordfs-token"]').content;
const KINDS = ["mount", "unmount", "intentRequested", "presenterAsked", "presenterAnswered", "presenterTimedOut",
  "presenterGone", "presenterAdded", "presenterRemoved", "granted", "denied", "released", "didChange", "didMove",
  "didDelete", "subitemAppeared", "subitemChanged", "subitemMoved", "subitemDeleted", "snapshotTaken",
  "conflictDetected", "conflictResolved", "gap", "retention", "logRecovered", "logStalled", "storeFailed",
  "lostUpdate", "coalesced", "presenterNotAsked"];
const MAX_ROWS = 2000;
// Records the page keeps (for the filters and the versions' seen names), and holds while paused:
// a page left open (or paused) on a busy mount keeps the newest ones, never all of them.
const MAX_KEPT = MAX_ROWS * 5;
const MAX_SEEN_PATHS = 5000;

// ---------------------------------------------------------------- helpers

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

// A name as the CLI shows it (`displayEscaped`), so it cannot pass for another: a byte that is not
// UTF-8 (the protocol sends it as \udcNN) and a control character as \xNN (\n, \t, \r), C1
// controls, line and paragraph separators and the bidirectional marks and overrides as \uXXXX,
// and the backslash as \\.
function shown(name) {
  return String(name ?? "").replace(/\\|(?<![\ud800-\udbff])[\udc80-\udcff]|[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g, (ch) => {
    const n = ch.charCodeAt(0);
    if (ch === "\\") return "\\\\";
    if (ch === "\n") return "\\n";
    if (ch === "\t") return "\\t";
    if (ch === "\r") return "\\r";
    if (n >= 0xdc80 && n <= 0xdcff) return "\\x" + (n - 0xdc00).toString(16).padStart(2, "0");
    if (n < 0x20 || n === 0x7f) return "\\x" + n.toString(16).padStart(2, "0");
    return "\\u" + n.toString(16).padStart(4, "0");
  });
}

function toast(message, isError) {
  const t = document.getElementById("toast");
  t.textContent = message;
  t.className = isError ? "toast error" : "toast";
  t.setAttribute("role", isError ? "alert" : "status");
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, isError ? 8000 : 4000);
}

async function api(method, path, body) {
  const init = { method, headers: { "X-CoordFS-Token": TOKEN }, credentials: "same-origin" };
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
  const r = await fetch(path, init);
  const text = await r.text();
  if (!r.ok) throw new Error(text.trim() || (r.status + " " + r.statusText));
  return JSON.parse(text);
}

function time(ms) { const d = new Date(ms); return d.toLocaleDateString() + " " + d.toLocaleTimeString(); }
function shortTime(iso) { const d = new Date(iso); return isNaN(d) ? iso : d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0"); }
function size(n) { return n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B"; }

// Path globs as `coordfs watch --path` takes them: * within a name, ** across folders, ? one character.
function globRegex(glob) {
  let g = glob.trim();
  if (g.startsWith("/")) g = g.slice(1);
  let re = "";
  for (let i = 0; i < g.length; i++) {
    const c = g[i];
    // "**/" is any number of whole folders (none too): "**/a.txt" is a.txt in any folder, not ba.txt.
    if (c === "*" && g[i + 1] === "*" && g[i + 2] === "/") { re += "(?:.*/)?"; i += 2; }
    else if (c === "*" && g[i + 1] === "*") { re += ".*"; i++; }
    else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp("^" + re + "(/.*)?$");
}

// ---------------------------------------------------------------- tabs

const tabs = document.querySelectorAll("nav button");
for (const b of tabs) b.addEventListener("click", () => showTab(b.dataset.tab));
function showTab(name) {
  for (const b of tabs) b.classList.toggle("active", b.dataset.tab === name);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "tab-" + name;
  if (name === "status") refreshStatus();
  if (name === "conflicts") refreshConflicts();
  if (name === "charts") drawCharts();
  if (name === "versions") showKnownPaths();
  location.hash = name;
}

// ---------------------------------------------------------------- the live event stream

const events = { all: [], cursor: null, paused: false, held: [], dropped: 0, socket: null, retry: 500, seenPaths: new Set() };
const kindSelect = document.getElementById("f-kind");
for (const k of KINDS) kindSelect.append(el("option", { value: k }, k));
const body = document.querySelector("#events tbody");
const filters = { path: document.getElementById("f-path"), kind: kindSelect, actor: document.getElementById("f-actor") };
for (const f of Object.values(filters)) f.addEventListener("input", rerender);

function matches(r) {
  const glob = filters.path.value.trim();
  if (glob) {
    const re = globRegex(glob);
    const p = (r.path || "").replace(/^\//, ""), o = (r.oldPath || "").replace(/^\//, "");
    if (!re.test(p) && !(o && re.test(o))) return false;
  }
  if (filters.kind.value && r.kind !== filters.kind.value) return false;
  const who = filters.actor.value.trim();
  if (who) {
    const a = r.actor || {};
    if (String(a.pid) !== who && String(a.uid) !== who && (a.executable || "") !== who) return false;
  }
  return true;
}

function details(r) {
  const d = r.details || {};
  const parts = [];
  for (const [k, v] of Object.entries(d)) parts.push(k + "=" + (typeof v === "object" ? JSON.stringify(v) : v));
  return parts.join(" ");
}

function row(r, fresh) {
  const a = r.actor || {};
  const actor = a.pid !== undefined ? shown(a.executable || "?") + " (pid " + a.pid + ", uid " + a.uid + ")" : "";
  const path = r.kind === "coalesced" && r.oldPath ? shown(r.path) + " .. " + shown(r.oldPath)
    : r.oldPath ? shown(r.oldPath) + " → " + shown(r.path) : shown(r.path || "");
  return el("tr", { class: fresh ? "new" : "", data: { seq: r.seq } },
    el("td", {}, r.seq), el("td", {}, shortTime(r.time)), el("td", { class: "k-" + r.kind }, r.kind),
    el("td", { class: "path" }, path), el("td", {}, actor), el("td", { class: "mono" }, details(r)));
}

function rerender() {
  clear(body);
  const shown = events.all.filter(matches).slice(-MAX_ROWS).reverse();
  for (const r of shown) body.append(row(r, false));
  info();
}

function info() {
  const held = events.held.length ? ", " + events.held.length + " held while paused" : "";
  const dropped = events.dropped ? ", " + events.dropped + " older ones not kept while paused (coordfs log has them)" : "";
  document.getElementById("ev-info").textContent = events.all.length + " records, cursor " + (events.cursor ?? "-") + held + dropped;
}

function seen(path) {
  const p = path.replace(/^\//, "");
  events.seenPaths.delete(p);  // a Set keeps its order of insertion: the newest last
  events.seenPaths.add(p);
  if (events.seenPaths.size > MAX_SEEN_PATHS) events.seenPaths.delete(events.seenPaths.values().next().value);
}

function add(records) {
  for (const r of records) {
    if (r.path) seen(r.path);
    chartNote(r);
    if (r.kind === "conflictDetected" || r.kind === "conflictResolved") refreshConflictsSoon();
    if (/presenter|granted|released|intentRequested/.test(r.kind)) refreshStatusSoon();
  }
  events.all.push(...records.slice(-MAX_KEPT));
  if (events.all.length > MAX_KEPT) events.all.splice(0, events.all.length - MAX_KEPT);
  // Only the newest rows are shown: a batch of many (a long pause) makes no more than that.
  for (const r of records.filter(matches).slice(-MAX_ROWS)) body.prepend(row(r, true));
  while (body.childElementCount > MAX_ROWS) body.lastElementChild.remove();
}

// While paused, records wait in `held`, the newest MAX_KEPT of them.
function hold(records) {
  events.held.push(...records);
  if (events.held.length > MAX_KEPT) {
    events.dropped += events.held.length - MAX_KEPT;
    events.held.splice(0, events.held.length - MAX_KEPT);
  }
}

document.getElementById("pause").addEventListener("click", (e) => {
  events.paused = !events.paused;
  e.target.textContent = events.paused ? "Resume" : "Pause";
  if (!events.paused) { const h = events.held; events.held = []; events.dropped = 0; add(h); }
  info();
});

function connect() {
  const conn = document.getElementById("conn");
  const after = events.cursor === null ? "" : "after=" + events.cursor + "&";
  const ws = new WebSocket("ws://" + location.host + "/api/events?" + after + "token=" + TOKEN);
  events.socket = ws;
  ws.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; events.retry = 500; };
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.error) { toast(msg.error, true); return; }
    if (msg.gone !== undefined) {
      // The mount went away: coordfs web stops; there is nothing to reconnect to.
      events.gone = msg.gone;
      conn.textContent = "mount gone"; conn.className = "conn gone";
      const banner = document.getElementById("gone");
      banner.textContent = "The mount is gone (" + msg.gone + "). coordfs web has stopped: what is shown is what the log held until then. Start coordfs web again once the folder is mounted.";
      banner.hidden = false;
      return;
    }
    // The cursor is the last record the server read: a reconnect asks for what follows it.
    const fresh = msg.records.filter((r) => events.cursor === null || r.seq > events.cursor);
    events.cursor = msg.cursor;
    if (events.paused) hold(fresh); else add(fresh);
    info();
  };
  ws.onclose = () => {
    if (events.gone !== undefined) return;
    conn.textContent = "reconnecting…"; conn.className = "conn down";
    setTimeout(connect, events.retry);
    events.retry = Math.min(events.retry * 2, 5000);
  };
}

// ---------------------------------------------------------------- status

let statusTimer = null;
function refreshStatusSoon() { clearTimeout(statusTimer); statusTimer = setTimeout(refreshStatus, 200); }
// What an access not granted yet waits for (status's `asking`): each presenter it asks, named as
// in the presenters table (its program and pid, when this page may see it), the ask and how long.
function asking(list, presenters) {
  return (list || []).map((a) => {
    const p = presenters.find((q) => q.presenter === a.presenter);
    return "presenter " + a.presenter + (p ? " " + shown(p.executable) + "[" + p.pid + "]" : "") + " to " + a.ask + " (" + a.askingMs + " ms)";
  }).join("; ");
}
function intents(list) { return (list || []).map((i) => i.intent + " " + shown(i.path) + (i.options && i.options.length ? " (" + i.options.join(", ") + ")" : "")).join("; "); }

async function refreshStatus() {
  try {
    const s = await api("GET", "/api/status");
    document.getElementById("mount").textContent = s.mountPoint;
    const log = s.eventLog;
    document.getElementById("status-log").textContent = log ? "event log: " + (log.state === "stuck" ? "STUCK since " + log.since + ": " + log.error : "writing (pid " + log.pid + ")") : "";
    fill("presenters", s.presenters, (p) => [p.presenter, p.pid, shown(p.executable), p.uid, p.kind, shown(p.path)], 5);
    fill("accesses", s.accesses, (a) => [a.access, a.pid, shown(a.executable), a.uid, a.heldMs + " ms", intents(a.intents), asking(a.asking, s.presenters)], 5);
    fill("waiting", s.waiting, (w) => [w.pid, shown(w.executable), w.uid, w.waitingMs + " ms", intents(w.intents)], 4);
    for (const p of s.presenters) seen(p.path);
  } catch (e) { toast("status: " + e.message, true); }
}

function fill(id, list, cells, pathColumn) {
  const tb = document.querySelector("#" + id + " tbody");
  clear(tb);
  document.getElementById("n-" + id).textContent = "(" + list.length + ")";
  for (const item of list) tb.append(el("tr", {}, ...cells(item).map((c, i) => el("td", { class: i === pathColumn ? "path" : "" }, c))));
}

// ---------------------------------------------------------------- conflicts

let conflictTimer = null;
function refreshConflictsSoon() { clearTimeout(conflictTimer); conflictTimer = setTimeout(refreshConflicts, 300); }
let openConflict = null;
let resolving = null;  // the conflict this page is resolving (its resolution is no news from elsewhere)

async function refreshConflicts() {
  try {
    const { conflicts } = await api("GET", "/api/conflicts");
    document.getElementById("conflict-count").textContent = conflicts.length ? String(conflicts.length) : "";
    const tb = document.querySelector("#conflicts tbody");
    clear(tb);
    for (const c of conflicts) {
      seen(c.path);
      tb.append(el("tr", { data: { id: c.id } }, el("td", {}, c.id), el("td", { class: "path" }, shown(c.path)), el("td", {}, c.kind),
        el("td", { class: "mono" }, c.presenter), el("td", {}, time(c.createdMs)), el("td", {}, c.baseVersion ?? "-"),
        el("td", {}, el("button", { class: "open-conflict", "aria-label": "Open conflict " + c.id + " of " + shown(c.path), on: { click: () => showConflict(c.id) } }, "Open"))));
    }
    if (openConflict !== null && !conflicts.some((c) => c.id === openConflict)) {
      // Resolved meanwhile from another page or the CLI: say so rather than let the view vanish.
      if (resolving !== openConflict) toast("Conflict " + openConflict + " was resolved elsewhere (another page or coordfs resolve): see the Events tab", true);
      openConflict = null;
      clear(document.getElementById("conflict-view"));
    }
  } catch (e) { toast("conflicts: " + e.message, true); }
}

const SIDE_TITLES = {
  base: "base (what the presenter loaded)", theirs: "theirs (the file now)",
  "lost-base": "base (what the saver had read)", "lost-theirs": "theirs (the version the save went over, kept)", "lost-mine": "mine (the file the save left)",
};

function lines(view, cls, title, note) {
  const pre = el("pre", {});
  const changed = new Set(view.changed);
  if (note) pre.append(el("span", { class: "line muted" }, note));
  else view.lines.forEach((l, i) => pre.append(el("span", { class: "line" + (changed.has(i) ? " changed" : "") }, l)));
  return el("div", { class: "side " + cls }, el("h3", {}, title), pre);
}

const LABELS = { save: "Save mine", reload: "Reload theirs", keepBoth: "Keep both", merge: "Merge", close: "Close" };

// What each button does, as `coordfs resolve --help` says it, for a presenter's conflict and for a lost update.
function explain(r, lost) {
  if (lost) return {
    save: "Keep the file the late save left; when you edited mine (or loaded a file), write that over it instead. What it replaces is kept as a version.",
    reload: "Write theirs (the version the late save went over) back over the file. The file now is kept as a version.",
    keepBoth: "Write theirs beside the file as \u201cNAME (conflict DATE TIME).EXT\u201d; the file stays mine.",
    merge: "Write the three-way merge of mine and theirs against what the saver read (the preview) over the file; overlapping changes are marked. The file now is kept as a version.",
    close: "Write nothing: the file stays as the late save left it.",
  }[r];
  return {
    save: "Write mine over the file (restores it if it was deleted). The file now is kept as a version.",
    reload: "Take theirs: the file stays as it is now and mine is dropped; the presenter is told to reload.",
    keepBoth: "Write mine beside the file as \u201cNAME (conflict DATE TIME).EXT\u201d; the file stays theirs.",
    merge: "Write the three-way merge of mine and theirs against the base (the preview) over the file; overlapping changes are marked. The file now is kept as a version.",
    close: "Drop mine and write nothing: the file stays as it is (or deleted).",
  }[r];
}

function base64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

async function showConflict(id) {
  const view = document.getElementById("conflict-view");
  clear(view);
  openConflict = id;
  let c;
  try { c = await api("POST", "/api/conflict", { id }); } catch (e) { toast(e.message, true); refreshConflicts(); return; }
  if (openConflict !== id) return;
  const lost = c.lostUpdate;
  const name = shown(c.conflict.path);
  const heading = el("h2", { tabindex: "-1" }, "Conflict " + id + ": ", el("span", { class: "path" }, name), " (" + c.conflict.kind + ")");
  view.append(heading);
  view.append(el("p", { class: "muted" }, lost
    ? "A process (" + c.conflict.presenter + ") saved over a version that changed after it read it. Mine is the file its save left; theirs is the version it went over, kept; the base is what it had read."
    : c.conflict.kind === "deletion"
      ? "The file was deleted while its presenter (" + c.conflict.presenter + ") had unsaved changes. Mine is the presenter's version, which only it has: it starts as the base; edit it or load it from a file."
      : "The file changed while its presenter (" + c.conflict.presenter + ") had unsaved changes. Mine is the presenter's version, which only it has: it starts as the base; edit it or load it from a file."));
  const notes = [];
  if (c.tooLarge) notes.push("Larger than the page shows (8 MiB): no side-by-side view or merge here (coordfs resolve --merge merges it); mine comes from a file, byte for byte.");
  else if (c.binary) notes.push("Binary contents: no side-by-side view or merge; mine comes from a file, byte for byte.");
  else if (!c.text) notes.push("Not plain UTF-8 text (a byte that is not UTF-8, or CR line ends): shown with \ufffd where a byte is not UTF-8; mine comes from a file, byte for byte, so nothing is changed by the browser.");
  // A symbolic link in place of the file is not followed: said so, instead of "deleted".
  if (c.link) notes.push(c.link.message + ": nothing of where it points is shown or merged here as the document.");
  else if (!lost && c.conflict.kind === "change" && !c.theirsExists) notes.push("The file was deleted since the conflict opened: Save mine restores it, Keep both writes mine beside it, Close drops mine.");
  if (lost && !c.mineExists && !c.link) notes.push("The file was deleted since the late save: Reload restores theirs, Save mine restores mine when you give it.");
  if (lost && !c.theirsExists) notes.push("The version the late save went over was not kept: nothing to reload or keep beside it.");
  if (!c.baseAvailable && c.conflict.kind !== "deletion") notes.push("The base was not kept: no merge.");
  for (const n of notes) view.append(el("p", { class: "note" }, n));

  let mineBytes = null;     // a file loaded as it is: { b64, name, size }
  let edited = false;       // mine's editor changed (a lost update's mine is otherwise the file)
  let holdsMerge = false;   // the editor holds the merged text
  let lastMerged = null;
  const mineText = el("textarea", { id: "mine", spellcheck: "false", "aria-label": "mine: your version of " + name });
  mineText.value = c.mineText ?? "";
  mineText.hidden = !c.text;
  const loaded = el("p", { id: "mine-loaded", class: "muted" });
  const mineView = el("pre", {});
  const merged = el("pre", {});
  const mergeInfo = el("span", { id: "merge-info", class: "muted" });
  const editMerge = el("button", { id: "edit-merge", type: "button", title: "Put the merged text in mine's editor, to mend the marked hunks; Save mine then writes it as it is" }, "Edit the merged text as mine");
  editMerge.hidden = true;
  editMerge.addEventListener("click", () => {
    if (lastMerged === null) return;
    mineText.value = lastMerged; edited = true; holdsMerge = true; mineBytes = null; loaded.textContent = "";
    mergeInfo.textContent = "(mine's editor holds the merged text: mend it there; Save mine writes it as it is)";
    editMerge.hidden = true;
    mineText.focus();
    update();
  });
  if (!c.binary) {
    const t = (side) => SIDE_TITLES[(lost ? "lost-" : "") + side] || SIDE_TITLES[side];
    const sides = [lines(c.base, "base", t("base"), c.baseAvailable ? null : "(not kept)"),
      lines(c.theirs, "theirs", t("theirs"), c.theirsExists ? null : (lost ? "(not kept)" : c.link ? "(a symbolic link, not followed)" : "(deleted)"))];
    const mineSide = el("div", { class: "side mine" }, el("h3", {}, lost ? SIDE_TITLES["lost-mine"] + (c.text ? ": edit to write your own" : "") : "mine (your version: edit, or load a file)"), mineView, mineText);
    if (lost && c.mine && !c.text) c.mine.lines.forEach((l, i) => mineView.append(el("span", { class: "line" + (c.mine.changed.includes(i) ? " changed" : "") }, l)));
    sides.push(mineSide);
    view.append(el("div", { class: "sides" }, ...sides));
    if (c.resolutions.includes("merge")) view.append(el("div", { class: "merged" }, el("h3", {}, "three-way merge preview ", mergeInfo, " ", editMerge), merged));
  } else {
    view.append(mineText);
  }
  const file = el("input", { type: "file", id: "mine-file", "aria-label": "load mine from a file" });
  file.addEventListener("change", async () => {
    const f = file.files[0];
    if (!f) return;
    const bytes = new Uint8Array(await f.arrayBuffer());
    let text = null;
    try { text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes); } catch (e) { text = null; }
    holdsMerge = false;
    if (c.text && text !== null && !text.includes("\r")) {
      mineText.value = text; edited = true; mineBytes = null; loaded.textContent = "";
    } else {
      mineBytes = { b64: base64(bytes), name: f.name, size: bytes.length };
      loaded.textContent = "Mine: " + f.name + " (" + size(bytes.length) + "), sent byte for byte" + (c.text ? "; editing the text above uses the text instead" : "");
    }
    update();
    preview();
  });
  mineText.addEventListener("input", () => { edited = true; if (mineBytes) { mineBytes = null; loaded.textContent = ""; } update(); clearTimeout(pending); pending = setTimeout(preview, 250); });

  // Mine as a request sends it: null when the page has none (a presenter's binary mine not loaded yet).
  function mineBody() {
    if (mineBytes) return { mineBase64: mineBytes.b64 };
    if (!c.text) return lost ? {} : null;
    if (lost && !edited) return {};
    return { mine: mineText.value };
  }

  view.append(el("div", { class: "actions" }, el("label", { for: "mine-file" }, "Load mine from a file: "), file), loaded);
  const actions = el("div", { class: "choices", role: "group", "aria-label": "resolutions" });
  const buttons = [];
  for (const r of c.resolutions) {
    const what = explain(r, lost);
    const descId = "what-" + r;
    const b = el("button", { type: "button", class: r === "merge" ? "primary resolve" : "resolve", data: { resolution: r }, title: what, "aria-describedby": descId,
      on: { click: () => resolve(id, r, mineBody(), buttons) } }, LABELS[r] || r);
    buttons.push(b);
    actions.append(el("div", { class: "choice" }, b, el("span", { id: descId, class: "muted" }, what)));
  }
  view.append(actions);
  const needsMine = el("p", { id: "needs-mine", class: "note" }, "Save mine, Keep both and Merge write your version: load it from a file first.");
  view.append(needsMine);
  function update() {
    const missing = mineBody() === null;
    for (const b of buttons) {
      if (!lost && ["save", "keepBoth", "merge"].includes(b.dataset.resolution)) b.disabled = missing;
      // Once the editor holds the merged text, Save mine writes it; merging it again would not.
      if (b.dataset.resolution === "merge" && holdsMerge) { b.disabled = true; b.title = "The editor holds the merged text: Save mine writes it"; }
    }
    needsMine.hidden = !missing;
  }
  update();
  heading.focus();  // keyboard users land on what opened; Tab goes on to mine and the buttons
  let pending = null;
  async function preview() {
    if (!c.resolutions.includes("merge") || holdsMerge) return;
    const mine = mineBody();
    if (mine === null) { mergeInfo.textContent = "(load mine to see the merge)"; return; }
    try {
      const p = await api("POST", "/api/merge-preview", Object.assign({ id }, mine));
      if (holdsMerge) return;
      clear(merged); clear(mineView);
      lastMerged = p.merged;
      for (const l of p.merged.replace(/\n$/, "").split("\n")) merged.append(el("span", { class: "line" + (/^(<<<<<<<|=======|>>>>>>>)/.test(l) ? " marker" : "") }, l));
      const ch = new Set(p.mine.changed);
      if (!c.text || mineBytes) p.mine.lines.forEach((l, i) => mineView.append(el("span", { class: "line" + (ch.has(i) ? " changed" : "") }, l)));
      mergeInfo.textContent = p.conflicts ? "(" + p.conflicts + " conflicting hunk(s) marked: Merge writes them with the marks; to mend them first, edit the merged text as mine)" : "(merges cleanly)";
      editMerge.hidden = !(c.text && p.conflicts);
    } catch (e) { mergeInfo.textContent = "(" + e.message + ")"; }
  }
  preview();
}

async function resolve(id, resolution, mine, buttons) {
  const body = { id, resolution };
  if (resolution === "save" || resolution === "keepBoth" || resolution === "merge") Object.assign(body, mine || {});
  for (const b of buttons) b.disabled = true;  // one resolution at a time: a second click sends nothing
  resolving = id;
  try {
    const r = await api("POST", "/api/resolve", body);
    let msg = "Resolved conflict " + r.conflict + " with " + LABELS[r.resolution];
    if (r.written) msg += "; wrote " + shown(r.written);
    if (r.preservedVersion) msg += "; the file it replaced is version " + r.preservedVersion;
    if (r.resolution === "merge") msg += r.mergeConflicts ? "; " + r.mergeConflicts + " conflicting hunk(s) marked" : "; merged cleanly";
    toast(msg);
    openConflict = null;
    clear(document.getElementById("conflict-view"));
    document.getElementById("last-resolution").textContent = msg;
  } catch (e) {
    toast("Not resolved: " + e.message, true);
    for (const b of buttons) b.disabled = false;
  }
  resolving = null;
  refreshConflicts();
}

// ---------------------------------------------------------------- versions

document.getElementById("v-form").addEventListener("submit", (e) => { e.preventDefault(); showVersions(document.getElementById("v-path").value); });

function showKnownPaths() {
  const known = document.getElementById("v-known");
  clear(known);
  const paths = [...events.seenPaths].filter((p) => p && !p.endsWith("/")).sort().slice(0, 60);
  if (paths.length) known.append(el("span", { class: "muted" }, "Seen: "));
  for (const p of paths) known.append(el("button", { on: { click: () => { document.getElementById("v-path").value = p; showVersions(p); } } }, shown(p)));
}

async function showVersions(path) {
  const list = document.getElementById("timeline");
  const view = document.getElementById("v-view");
  clear(list); clear(view);
  let v;
  try { v = await api("POST", "/api/versions", { path }); } catch (e) { toast("versions: " + e.message, true); return; }
  list.append(el("li", { class: "current" }, el("strong", {}, "now"), " ", el("span", { class: "path" }, shown(v.path))));
  if (!v.versions.length) view.append(el("p", { class: "muted" }, "No kept versions of this document."));
  for (const x of v.versions) {
    list.append(el("li", { data: { version: x.version } },
      el("strong", {}, "version " + x.version), " ", el("span", { class: "muted" }, time(x.createdMs)),
      el("div", {}, size(x.size) + " · " + x.reason + " · " + x.method + (x.pinned ? " · pinned" : "")),
      el("div", { class: "row" },
        el("button", { on: { click: () => viewVersion(x.version) } }, "View"),
        el("button", { class: "diff", on: { click: () => diffVersion(v.path, x.version) } }, "Diff against now"),
        el("button", { class: "restore", on: { click: () => restoreVersion(v.path, x.version) } }, "Restore"))));
  }
}

async function viewVersion(version) {
  const view = document.getElementById("v-view");
  clear(view);
  try {
    const r = await api("POST", "/api/version", { version });
    const shownText = r.tooLarge ? "(larger than the page shows, 8 MiB: coordfs show PATH --version " + version + " writes it)" : r.binary ? "(binary contents)" : r.text;
    view.append(el("h3", {}, "version " + version + " (" + size(r.size) + ")"), el("pre", {}, shownText));
  } catch (e) { toast(e.message, true); }
}

async function diffVersion(path, version) {
  const view = document.getElementById("v-view");
  clear(view);
  try {
    const r = await api("POST", "/api/diff", { path, version });
    const pre = el("pre", { id: "diff" });
    if (r.equal) pre.append("(version " + version + " is the file as it is now)");
    for (const l of r.diff.replace(/\n$/, "").split("\n")) {
      if (!l) continue;
      const cls = l.startsWith("@@") ? "diff-hunk" : l.startsWith("+") && !l.startsWith("+++") ? "diff-add" : l.startsWith("-") && !l.startsWith("---") ? "diff-del" : "";
      pre.append(el("span", { class: cls || "line" }, l));
    }
    view.append(el("h3", {}, "version " + version + " → now"), pre);
  } catch (e) { toast(e.message, true); }
}

async function restoreVersion(path, version) {
  if (!confirm("Restore version " + version + " over " + shown(path) + "? (The file it replaces is kept as a version.)")) return;
  try {
    const r = await api("POST", "/api/restore", { path, version });
    toast("Restored " + shown(r.path) + " to version " + r.version + (r.preservedVersion ? "; the file it replaced is version " + r.preservedVersion : ""));
    showVersions(path);
  } catch (e) { toast("restore: " + e.message, true); }
}

// ---------------------------------------------------------------- charts (drawn here, on canvases)

const chart = { latencies: [], perSecond: new Map() };
const LAT_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, Infinity]; // ms

function chartNote(r) {
  const t = Math.floor(new Date(r.time).getTime() / 1000);
  if (!isNaN(t)) chart.perSecond.set(t, (chart.perSecond.get(t) || 0) + 1);
  // Seconds older than the chart shows go (also while the chart is not drawn).
  if (chart.perSecond.size > 1200) for (const k of chart.perSecond.keys()) if (k < t - 600) chart.perSecond.delete(k);
  if (r.kind === "presenterAnswered" && r.details && r.details.latencyMicros !== undefined) chart.latencies.push(r.details.latencyMicros / 1000);
  if (chart.latencies.length > 100000) chart.latencies.splice(0, 50000);
  if (!document.getElementById("tab-charts").hidden) drawChartsSoon();
}

let chartTimer = null;
function drawChartsSoon() { if (!chartTimer) chartTimer = setTimeout(() => { chartTimer = null; drawCharts(); }, 500); }

function bars(canvas, values, labels, title) {
  const g = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, left = 44, bottom = 34, top = 16;
  g.clearRect(0, 0, W, H);
  g.font = "11px system-ui, sans-serif";
  const max = Math.max(1, ...values);
  const bw = (W - left - 10) / values.length;
  g.strokeStyle = "#dcdfe2"; g.fillStyle = "#6b7075";
  for (let i = 0; i <= 4; i++) {
    const y = top + (H - top - bottom) * (1 - i / 4);
    g.beginPath(); g.moveTo(left, y); g.lineTo(W - 10, y); g.stroke();
    g.fillText(String(Math.round(max * i / 4)), 4, y + 4);
  }
  g.fillStyle = "#1f6feb";
  values.forEach((v, i) => {
    const h = (H - top - bottom) * v / max;
    g.fillRect(left + i * bw + 1, H - bottom - h, Math.max(1, bw - 2), h);
  });
  g.fillStyle = "#6b7075";
  labels.forEach((l, i) => { if (l) g.fillText(l, left + i * bw + 2, H - bottom + 14); });
  g.fillText(title, left, H - 4);
}

function drawCharts() {
  const counts = LAT_BUCKETS.map(() => 0);
  for (const ms of chart.latencies) counts[LAT_BUCKETS.findIndex((b) => ms <= b)]++;
  bars(document.getElementById("latency"), counts, LAT_BUCKETS.map((b) => b === Infinity ? ">5 s" : "≤" + (b >= 1000 ? b / 1000 + " s" : b + " ms")),
    chart.latencies.length + " answers; bars: answers per latency bucket");
  const now = Math.floor(Date.now() / 1000);
  const secs = [], labels = [];
  for (let t = now - 299; t <= now; t++) { secs.push(chart.perSecond.get(t) || 0); labels.push((now - t) % 60 === 0 ? "-" + (now - t) + " s" : ""); }
  for (const t of chart.perSecond.keys()) if (t < now - 600) chart.perSecond.delete(t);
  bars(document.getElementById("rate"), secs, labels, "records per second, oldest left");
}
setInterval(() => { if (!document.getElementById("tab-charts").hidden) drawCharts(); }, 1000);

// ---------------------------------------------------------------- start

connect();
refreshStatus();
refreshConflicts();
setInterval(() => { if (!document.getElementById("tab-status").hidden) refreshStatus(); }, 2000);
setInterval(refreshConflicts, 5000);
if (location.hash.length > 1) showTab(location.hash.slice(1));
