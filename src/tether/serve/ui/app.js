// Tether's dashboard: plain JavaScript, no build step. It reads the same API as any
// client (bearer token, JSON, Server-Sent Events through fetch so the token travels in
// a header, never in a URL).
"use strict";

const TOKEN_KEY = "tether.token";
const POLL_MS = 2000;
const TAIL = 2000; // journal entries replayed when a session is opened

const $ = (id) => document.getElementById(id);
const state = {
  token: null, selected: null, sessions: [], health: null,
  stream: null, lastSeq: 0, turnEl: null, pending: "", flushQueued: false,
  tools: new Map(),
};

// --- the token ----------------------------------------------------------------------
// `#token=...` in the URL (as `tether serve` prints it) is taken once and removed; the
// fragment is never sent to the server, so it cannot end up in a proxy's access log.
function bootToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem(TOKEN_KEY);
  if (!state.token) askToken();
}

function askToken() {
  const dialog = $("token-dialog");
  if (!dialog.open) dialog.showModal();
}

$("token-form").addEventListener("submit", () => {
  state.token = $("token-input").value.trim();
  sessionStorage.setItem(TOKEN_KEY, state.token);
  refresh();
});
$("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  askToken();
});

async function api(method, path, body) {
  const init = { method, headers: { Authorization: `Bearer ${state.token}` } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) { askToken(); throw new Error("unauthorized"); }
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) throw new Error((data && (data.detail || data.title)) || `HTTP ${res.status}`);
  return data;
}

// --- the session list ---------------------------------------------------------------
function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null || text === "" ? "–" : String(text);
  if (cls) td.className = cls;
  return td;
}

function badge(status) {
  const span = document.createElement("span");
  span.className = `badge ${status}`;
  span.textContent = status;
  return span;
}

function statusOf(s) {
  if (s.state === "closed") return "closed";
  return (s.status && s.status.status) || "idle";
}

function lastEnd(end) {
  if (!end) return "";
  return `${end.reason || ""}${end.exitCode != null ? ` (${end.exitCode})` : ""}`;
}

// Through a fleet router each session names the host it lives on: a column then.
function hostOf(s) {
  return s.hostAvailable === false ? `${s.hostId} (unavailable)` : s.hostId;
}

function renderList() {
  const body = $("sessions").querySelector("tbody");
  body.replaceChildren();
  const fleet = state.sessions.some((s) => s.hostId);
  $("host-col").hidden = !fleet;
  for (const s of state.sessions) {
    const st = s.status || {};
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    if (s.id === state.selected) tr.classList.add("selected");
    const name = cell(s.name || "(default)");
    name.title = `${s.cwd}\n${s.id}`;
    const status = document.createElement("td");
    status.append(badge(statusOf(s)));
    tr.append(name);
    if (fleet) tr.append(cell(hostOf(s), "host"));
    tr.append(
      status, cell(s.agent), cell(st.ownerPid), cell(st.agentPid),
      cell(st.queueDepth ?? 0), cell(st.currentRequest, "turn"), cell(lastEnd(s.lastEnd)),
    );
    tr.addEventListener("click", () => select(s.id));
    body.append(tr);
  }
  $("no-sessions").hidden = state.sessions.length > 0;
}

async function refresh() {
  if (!state.token) return;
  try {
    const closed = $("show-closed").checked ? "all" : "open";
    const [health, list] = await Promise.all([
      api("GET", "/v1/health"),
      api("GET", `/v1/sessions?live=1&state=${closed}`),
    ]);
    state.health = health;
    state.sessions = list.sessions;
    $("gateway").textContent = `${health.host} · v${health.version} · ${list.sessions.length} session(s) · ${health.sseClients} stream(s)`;
    renderList();
    if (state.selected) await refreshDetail();
  } catch (err) {
    $("gateway").textContent = `gateway: ${err.message}`;
  }
}
$("show-closed").addEventListener("change", refresh);

// --- one session --------------------------------------------------------------------
function field(dl, name, value) {
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.textContent = value == null || value === "" ? "–" : String(value);
  dl.append(dt, dd);
}

async function refreshDetail() {
  const id = state.selected;
  const s = await api("GET", `/v1/sessions/${id}`);
  if (id !== state.selected) return;
  const st = s.status || {};
  $("d-name").textContent = `${s.name || "(default)"} · ${s.agent}`;
  $("d-sub").textContent = `${s.cwd} · ${id.slice(0, 16)}…`;
  const dl = $("d-status");
  dl.replaceChildren();
  field(dl, "status", "");
  dl.lastChild.replaceChildren(badge(s.state === "closed" ? "closed" : st.status || "idle"));
  if (s.hostId) field(dl, "host", hostOf(s));
  field(dl, "owner pid", st.ownerPid);
  field(dl, "generation", st.ownerGeneration);
  field(dl, "agent pid", st.agentPid);
  field(dl, "keeper pid", st.keeperPid);
  field(dl, "queue", st.queueDepth);
  field(dl, "current turn", st.currentRequest);
  field(dl, "watchers", st.watchers);
  attachedField(dl, st.attached || []);
  field(dl, "journal seq", st.journalSeq);
  field(dl, "last prompt", st.lastPromptTime ? new Date(st.lastPromptTime * 1000).toLocaleString() : null);
  field(dl, "last end", lastEnd(s.lastEnd));
  const p = s.processes || {};
  $("d-lease").textContent = p.leaseId
    ? `lease ${p.leaseId} · ${p.leaseState} · pgid ${p.pgid ?? "–"} · cgroup ${p.cgroup || "none"}`
    : "no lease";
  const body = $("d-procs").querySelector("tbody");
  body.replaceChildren();
  for (const proc of p.processes || []) {
    const tr = document.createElement("tr");
    tr.append(cell(proc.role), cell(proc.pid), cell(proc.ppid), cell(proc.state), cell(proc.command || proc.comm, "cmd"));
    tr.lastChild.title = proc.command || "";
    body.append(tr);
  }
  const closed = s.state === "closed";
  for (const b of ["btn-cancel", "btn-close", "btn-terminate"]) $(b).disabled = closed;
  renderQuestions(s);
}

// Who watches and who controls the session: pid and uid as the owner's kernel gave
// them (SO_PEERCRED), and the door each came through (cli, http, acp, library).
function attachedField(dl, parties) {
  field(dl, "attached", parties.length ? "" : null);
  const dd = dl.lastChild;
  for (const p of parties) {
    const line = document.createElement("span");
    line.className = "party";
    line.textContent = `${(p.roles || []).join("+") || "attached"} · pid ${p.pid ?? "?"} · uid ${p.uid ?? "?"} · ${p.door || "?"}`;
    dd.append(line);
  }
}

// The agent's open questions (pending interactions). While a session is open here its
// stream is a controller (?control=1), so questions wait for these buttons instead of
// being decided at once by the non-interactive policy.
function renderQuestions(s) {
  const items = (s.status && s.status.interactions) || [];
  const box = $("d-questions-list");
  box.replaceChildren();
  $("d-questions").hidden = items.length === 0;
  for (const q of items) {
    const row = document.createElement("div");
    row.className = "question";
    row.dataset.id = q.id;
    const tool = q.toolCall || {};
    const text = document.createElement("div");
    text.className = "q-text";
    text.textContent = q.question === "permission"
      ? `${tool.kind || "tool"}: ${tool.title || tool.toolCallId || q.id}`
      : `${q.mode || "question"}: ${q.message || q.url || q.id}`;
    row.append(text);
    const answers = q.question === "permission"
      ? [["allow", "Allow"], ["always", "Always"], ["deny", "Deny"]]
      : [["accept", "Accept"], ["decline", "Decline"], ["cancel", "Cancel"]];
    for (const [word, label] of answers) {
      const b = document.createElement("button");
      b.textContent = label;
      b.className = `answer ${word}`;
      b.addEventListener("click", () =>
        act(`answer ${q.id}`, "POST", `/v1/sessions/${state.selected}/questions/${encodeURIComponent(q.id)}`, { answer: word }));
      row.append(b);
    }
    box.append(row);
  }
}

function select(id) {
  if (state.selected === id) return;
  state.selected = id;
  $("detail-pane").hidden = false;
  $("transcript").replaceChildren();
  message(null);
  renderList();
  openStream(id);
  refreshDetail().catch((err) => message(err.message, true));
}

function message(text, isError) {
  const el = $("d-message");
  el.hidden = !text;
  el.textContent = text || "";
  el.className = `message${isError ? " error" : ""}`;
}

async function act(label, method, path, body) {
  try {
    const res = await api(method, path, body);
    message(`${label}: ${summary(res)}`);
  } catch (err) {
    message(`${label} failed: ${err.message}`, true);
  }
  refresh();
}

function summary(res) {
  if (!res) return "done";
  if ("cancelled" in res) return res.cancelled ? "cancelled" : `nothing to cancel${res.reason ? ` (${res.reason})` : ""}`;
  if (res.action === "session_closed") return `closed · survivors ${(res.survivors || []).length}`;
  if (res.terminated) return `terminated${res.alreadyEnded ? " (had already ended)" : ""}`;
  if (res.requestId) return `queued ${res.requestId}`;
  if (res.interaction) return `${res.interaction.answer || "answered"}`;
  return "done";
}

// Every action names the selected session: with none selected there is nothing to do
// (the detail pane, and so these buttons, are hidden until a session is selected).
$("btn-cancel").addEventListener("click", () => {
  if (state.selected) act("cancel", "POST", `/v1/sessions/${state.selected}/cancel`);
});
$("btn-close").addEventListener("click", () => {
  if (!state.selected) return;
  if (confirm("Close this session? Its agent and every process it started are ended.")) {
    act("close", "DELETE", `/v1/sessions/${state.selected}`);
  }
});
$("btn-terminate").addEventListener("click", () => {
  if (!state.selected) return;
  if (confirm("Terminate this session now (TERM, grace, KILL)?")) {
    act("terminate", "POST", `/v1/sessions/${state.selected}/terminate`);
  }
});
$("prompt-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("prompt-text").value;
  if (!text.trim() || !state.selected) return;
  $("prompt-text").value = "";
  act("prompt", "POST", `/v1/sessions/${state.selected}/prompt`, { prompt: text });
});
$("prompt-text").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("prompt-form").requestSubmit();
});

// --- the live transcript (SSE over fetch) -----------------------------------------------
function openStream(id) {
  if (state.stream) state.stream.abort();
  const ctrl = new AbortController();
  state.stream = ctrl;
  state.lastSeq = 0;
  state.turnEl = null;
  state.tools = new Map();
  follow(id, ctrl);
}

async function follow(id, ctrl) {
  while (!ctrl.signal.aborted) {
    let res;
    const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
    if (state.lastSeq) headers["Last-Event-ID"] = String(state.lastSeq);
    try {
      const where = state.lastSeq ? "" : `&tail=${TAIL}`;
      res = await fetch(`/v1/sessions/${id}/events?control=1${where}`, { headers, signal: ctrl.signal });
    } catch (_err) {
      if (ctrl.signal.aborted) return;
      await sleep(1000);
      continue;
    }
    if (res.status === 204) { streamNote("ended"); return; }
    if (!res.ok) { streamNote(`HTTP ${res.status}`); await sleep(2000); continue; }
    streamNote("live");
    const ended = await readEvents(res.body, ctrl);
    if (ended) { streamNote("session ended"); return; }
    if (!ctrl.signal.aborted) { streamNote("reconnecting…"); await sleep(500); }
  }
}

function streamNote(text) { $("d-stream").textContent = text ? `· ${text}` : ""; }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function readEvents(body, ctrl) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let ended = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let id = null, event = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("id: ")) id = line.slice(4);
          else if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        if (event === "message" && data) {
          const entry = JSON.parse(data);
          if (id) state.lastSeq = Number(id);
          if (showEntry(entry)) ended = true;
        }
        // "lagged": we fell behind; the loop reconnects from lastSeq and replays.
      }
    }
  } catch (_err) {
    // aborted (another session was selected) or the connection dropped
  }
  void ctrl;
  return ended;
}

function append(cls, text) {
  const box = $("transcript");
  const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const el = document.createElement("div");
  el.className = cls;
  el.textContent = text;
  box.append(el);
  if (stick) box.scrollTop = box.scrollHeight;
  return el;
}

function flushText() {
  state.flushQueued = false;
  if (!state.pending) return;
  if (!state.turnEl) state.turnEl = append("msg agent", "");
  state.turnEl.textContent += state.pending;
  state.pending = "";
  const box = $("transcript");
  box.scrollTop = box.scrollHeight;
}

function agentText(text) {
  state.pending += text;
  if (!state.flushQueued) {
    state.flushQueued = true;
    requestAnimationFrame(flushText);
  }
}

function promptText(frame) {
  const blocks = (frame.params && frame.params.prompt) || [];
  return blocks.filter((b) => b.type === "text").map((b) => b.text).join("\n");
}

// Returns true when the entry ends the session.
function showEntry(e) {
  if (e.kind === "acp") {
    const f = e.frame || {};
    if (e.direction === "out" && f.method === "session/prompt") {
      flushText();
      append("msg user", promptText(f));
      state.turnEl = null;
    } else if (e.direction === "in" && f.method === "session/update") {
      const u = (f.params && f.params.update) || {};
      if (u.sessionUpdate === "agent_message_chunk" && u.content && u.content.type === "text") {
        agentText(u.content.text);
      } else if (u.sessionUpdate === "tool_call") {
        flushText();
        const el = append("msg tool", `tool: ${u.title || u.toolCallId} · ${u.status || ""}`);
        state.tools.set(u.toolCallId, { el, title: u.title || u.toolCallId });
        state.turnEl = null;
      } else if (u.sessionUpdate === "tool_call_update" && state.tools.has(u.toolCallId)) {
        const t = state.tools.get(u.toolCallId);
        t.el.textContent = `tool: ${t.title} · ${u.status || ""}`;
      }
    }
    return false;
  }
  flushText();
  switch (e.kind) {
    case "turn_started": state.turnEl = null; break;
    case "turn_ended":
      append("sys end", `[done] ${e.stopReason || ""}${e.durationMs != null ? ` · ${Math.round(e.durationMs)} ms` : ""}`);
      state.turnEl = null;
      break;
    case "session_ended":
      append("sys end", `session ended: ${e.reason || ""} (${e.message || ""})`);
      return true;
    case "cancel_result": append("sys", `cancel: ${e.cancelled ? "cancelled" : e.reason || "nothing"}`); break;
    case "owner_started": append("sys", `owner started (pid ${e.pid}, generation ${e.generation})`); break;
    case "owner_stopped": append("sys", `owner stopped${e.reason ? `: ${e.reason}` : ""}`); break;
    case "agent_run_started": append("sys", `agent started${e.agentPid ? ` (pid ${e.agentPid})` : ""}`); break;
    case "agent_run_ended": append("sys", `agent run ended: ${e.reason || ""} ${e.message || ""}`); break;
    case "interaction_opened":
      append("sys", `question ${e.id}: ${(e.toolCall && e.toolCall.title) || e.message || ""}`);
      refresh();
      break;
    case "interaction_resolved":
      append("sys", `answered ${e.id}: ${e.answer || ""} (${e.how || ""})`);
      refresh();
      break;
    case "mode_set": append("sys", `mode: ${e.modeId || ""}`); break;
    case "config_set": append("sys", `config: ${e.configId || ""} = ${e.value ?? ""}`); break;
    default: break;
  }
  return false;
}

bootToken();
refresh();
setInterval(refresh, POLL_MS);
