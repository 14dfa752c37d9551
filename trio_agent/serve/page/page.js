// The session page: the sessions, and one session's transcript live from its
// event stream (read with fetch, as server-sent events: on a reconnect it sends
// Last-Event-ID, and the server resumes exactly after it). Everything the model
// or a tool wrote is put in as text (textContent), never as HTML.
//
// The token, when the server has one, is kept in sessionStorage (this tab, this
// origin: scheme, host and port) and sent as `Authorization: Bearer`, never as a
// cookie (a page on another port of the same host could read or send one) nor
// in a URL (logs, Referer). An address `#token=...` gives it: read, kept, and
// taken out of the address bar before any request.
"use strict";

const TOKEN_KEY = "trio-agent-token";
const RETRY_MS = 1000; // the first wait before the event stream is asked for again
const RETRY_MAX_MS = 15000;

// as the server takes a session's id (it names files)
const SESSION_ID = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/;
const SESSION_ID_SAID = "an id is 1 to 128 letters, digits, '_', '-' or '.', not first";

const $ = (id) => document.getElementById(id);
let sending = false; // a message posted, not answered yet: sent once, however often asked
let open = null; // the open session: {id, source (its stream's AbortController), items, running}
let follow = true; // the transcript keeps its end in view until the reader scrolls up
let lastTop = 0; // where the transcript was scrolled to last (by the page or the reader)
const pending = new Map(); // streamed text not yet shown: node -> [text, ...]
let frame = 0; // the animation frame that shows it, once asked for

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  return made;
}

function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch (_) {
    return memoryToken; // storage refused (a browser's setting): this page's memory
  }
}

let memoryToken = null;

function keepToken(value) {
  memoryToken = value || null;
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch (_) {
    // kept in memory only
  }
}

function authorized(headers) {
  const value = token();
  if (value) headers.authorization = `Bearer ${value}`;
  return headers;
}

async function api(method, path, body) {
  const init = { method, headers: authorized({}), credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const answer = await fetch(path, init);
  if (answer.status === 401) $("login").hidden = false;
  let value = null;
  try {
    value = await answer.json();
  } catch (_) {
    value = null;
  }
  if (!answer.ok) {
    const refused = new Error((value && value.error) || `HTTP ${answer.status}`);
    refused.status = answer.status;
    throw refused;
  }
  return value;
}

function sessionPath(id, rest) {
  return `/sessions/${encodeURIComponent(id)}${rest || ""}`;
}

function showError(text) {
  $("error").textContent = text || "";
  $("error").hidden = !text;
}

// -- the sessions list: one request at a time, and at most one more after it
// for every caller meanwhile (a reload replays a turn end per turn: thousands)
let listing = null;
let listingNext = null;

function refreshSessions() {
  if (!listing) {
    listing = listSessions().finally(() => {
      listing = null;
    });
    return listing;
  }
  if (!listingNext) {
    listingNext = listing.then(() => {
      listingNext = null;
      return refreshSessions();
    });
  }
  return listingNext;
}

async function listSessions() {
  try {
    const { sessions } = await api("GET", "/sessions");
    const list = $("sessions");
    list.replaceChildren();
    for (const session of sessions) {
      const link = element("a", open && open.id === session.id ? "open" : "", session.id);
      link.href = `#${encodeURIComponent(session.id)}`;
      link.dataset.session = session.id;
      const item = element("li");
      item.append(link);
      if (session.running_turn !== null) {
        item.append(element("span", "running", ` turn ${session.running_turn} running`));
      }
      list.append(item);
    }
    return sessions.map((session) => session.id);
  } catch (error) {
    showError(`sessions: ${error.message}`);
    return null; // not known
  }
}

// -- a session
async function openSession(id) {
  if (open && open.source) open.source.abort();
  open = { id, source: null, items: new Map(), running: false, turn: 0, pieceNo: 0, lastKind: "" };
  $("title").textContent = id;
  pending.clear();
  $("transcript").replaceChildren();
  follow = true;
  lastTop = 0;
  $("message").disabled = false;
  $("send").disabled = sending; // a message under way: sent once
  setRunning(false);
  showError("");
  if (!SESSION_ID.test(id)) {
    // said now, not as a refusal of the first message (or a bare 404 for "a/b")
    $("message").disabled = $("send").disabled = true;
    $("status").textContent = "";
    showError(`no session can have this id: ${SESSION_ID_SAID}`);
    return;
  }
  const known = await refreshSessions();
  if (open.id !== id) return;
  // not listed: a session not made yet (sending a message makes it); the list
  // not had (null): asked for, a 404 says it is not made yet
  if (known === null || known.includes(id)) listen();
  else $("status").textContent = "new session: send a message to start it";
}

// -- the event stream: server-sent events over fetch (EventSource can send no
// Authorization header), resumed after the last id seen
function sseParser(dispatch, idle) {
  // Lines end in \r\n, \n or \r; a \r last in a chunk waits for the next (it may
  // be half of \r\n). A blank line dispatches the event gathered, if it has data.
  let buffer = "";
  let data = [];
  let id = null;
  let type = "";
  const line = (text) => {
    if (text === "") {
      if (data.length) dispatch({ id, type: type || "message", data: data.join("\n") });
      data = [];
      type = "";
      return;
    }
    if (text[0] === ":") {
      if (text === ": keep-alive" && idle) idle(); // caught up, and nothing new since
      return;
    }
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value[0] === " ") value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") type = value;
    else if (field === "id" && !value.includes("\0")) id = value;
  };
  return (chunk) => {
    buffer += chunk;
    let start = 0;
    for (let at = 0; at < buffer.length; at++) {
      const char = buffer[at];
      if (char !== "\n" && char !== "\r") continue;
      if (char === "\r" && at + 1 === buffer.length) break; // half of \r\n, perhaps
      line(buffer.slice(start, at));
      if (char === "\r" && buffer[at + 1] === "\n") at++;
      start = at + 1;
    }
    buffer = buffer.slice(start);
  };
}

function listen() {
  const session = open;
  if (session.source) return;
  const stop = new AbortController();
  session.source = stop;
  session.lastId = null;
  stream(session, stop.signal);
}

async function stream(session, signal) {
  let wait = RETRY_MS;
  while (!signal.aborted && open === session) {
    const headers = authorized({ accept: "text/event-stream" });
    if (session.lastId !== null) headers["last-event-id"] = session.lastId;
    let answer;
    try {
      answer = await fetch(sessionPath(session.id, "/events"), {
        headers,
        signal,
        credentials: "omit",
        cache: "no-store",
      });
    } catch (_) {
      answer = null; // the network: try again
    }
    if (signal.aborted || open !== session) return;
    if (answer && answer.status >= 500) {
      answer.body?.cancel().catch(() => {}); // unavailable for now (a proxy, a blip): again
    } else if (answer && !refusedStream(answer)) {
      $("status").textContent = session.running ? "running" : "idle";
      wait = RETRY_MS;
      if (!(await readEvents(session, answer, signal))) return;
    } else if (answer) {
      // refused (a 4xx, or no event stream): no use asking again as it is
      session.source = null;
      const said = await answer.json().then((value) => value && value.error, () => null);
      if (open !== session) return;
      if (answer.status === 404 && session.lastId === null) {
        $("status").textContent = "new session: send a message to start it";
        return;
      }
      $("status").textContent = "disconnected";
      const why = said || `HTTP ${answer.status}`;
      showError(`the event stream was refused (${why}); reload the page to try again`);
      refreshSessions(); // a 401 shows the token form
      return;
    }
    $("status").textContent = "reconnecting…";
    await new Promise((done) => setTimeout(done, wait));
    wait = Math.min(wait * 2, RETRY_MAX_MS);
  }
}

function refusedStream(answer) {
  const kind = answer.headers.get("content-type") || "";
  return answer.status !== 200 || !kind.startsWith("text/event-stream") || !answer.body;
}

async function readEvents(session, answer, signal) {
  // true when the stream ended and may be asked for again; false when this page left it
  const reader = answer.body.getReader();
  const text = new TextDecoder();
  const push = sseParser(
    (event) => {
      if (event.id !== null) session.lastId = event.id;
      if (event.type === "message" && open === session) render(JSON.parse(event.data).event);
    },
    () => settle(session),
  );
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      push(text.decode(value, { stream: true }));
      if (open !== session) break;
    }
  } catch (_) {
    // cut off: asked for again after the last event seen
  }
  reader.cancel().catch(() => {});
  return !signal.aborted && open === session;
}

async function settle(session) {
  // A turn cut off by its server's crash has no turn.finished: once the stream is
  // idle, ask the server whether it still runs that turn (or a later one).
  if (!session.running || session.settling) return;
  const turn = session.turn;
  session.settling = true;
  try {
    const state = await api("GET", sessionPath(session.id));
    const over = state.running_turn === null && state.turns >= turn;
    if (over && open === session && session.running && session.turn === turn) {
      setRunning(false);
      refreshSessions();
    }
  } catch (_) {
    // asked again at the next keep-alive
  } finally {
    session.settling = false;
  }
}

function setRunning(running) {
  if (open) open.running = running;
  $("cancel").hidden = !running;
  $("status").textContent = running ? "running" : "idle";
  for (const row of $("transcript").querySelectorAll(".held")) {
    if (!row.dataset.sending) heldControls(row, running);
  }
}

// A held call is decided once its turn has ended (awaiting approval): the server
// refuses a decision while a turn runs, and a call is held before its turn ends.
function heldControls(row, disabled) {
  for (const control of row.querySelectorAll("button, input")) control.disabled = disabled;
}

// The transcript changes once per animation frame: streamed text waits in
// `pending` (a piece growing by `textContent +=` copied all of it per chunk),
// and the end is brought into view then, without a layout per event.
function show() {
  if (!frame) frame = requestAnimationFrame(flush);
}

function applyText() {
  for (const [node, parts] of pending) node.append(parts.join(""));
  pending.clear();
}

function flush() {
  frame = 0;
  applyText();
  const transcript = $("transcript");
  if (follow) transcript.scrollTop = transcript.scrollHeight;
  lastTop = transcript.scrollTop;
}

function add(node) {
  applyText(); // the text streamed so far is in before anything after it
  $("transcript").append(node);
  show();
  return node;
}

function appendText(node, text) {
  const parts = pending.get(node);
  if (parts) parts.push(text);
  else pending.set(node, [text]);
  show();
}

function scrolled() {
  // the transcript grows between frames: only a move up is the reader leaving the end
  const transcript = $("transcript");
  if (transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40) follow = true;
  else if (transcript.scrollTop < lastTop) follow = false;
  lastTop = transcript.scrollTop;
}

function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).map((block) => block.text || `[${block.type}]`).join("");
}

// -- events, one at a time, in sequence order
function render(event) {
  const handler = handlers[event.type];
  if (handler) handler(event);
}

const handlers = {
  "turn.started": (event) => {
    open.turn = event.turn;
    add(element("div", "turn-mark", `turn ${event.turn}`));
    setRunning(true);
  },
  "message.accepted": (event) => {
    const message = event.message;
    if (message.role === "user") add(element("div", "user", textOf(message.content)));
    else if (message.role === "tool_result") toolResult(message);
  },
  "model.chunk": (event) => {
    const chunk = event.chunk;
    const attempt = `${event.request_id}.${event.attempt}`;
    if (chunk.type === "text_delta" && chunk.text) piece(attempt, "text", chunk.text);
    else if (chunk.type === "thinking_delta" && chunk.thinking) piece(attempt, "thinking", chunk.thinking);
    else if (chunk.type === "tool_call") toolCall(attempt, chunk);
  },
  "attempt.failed": (event) => {
    // its text and calls are void: none of them reaches the transcript, none runs
    const attempt = `${event.request_id}.${event.attempt}`;
    for (const [key, node] of open.items) {
      if (key.startsWith(`${attempt}:`)) node.classList.add("void");
    }
  },
  "tool.started": (event) => {
    const box = toolBox(event.call);
    box.querySelector(".state").textContent = " running…";
  },
  "tool.finished": (event) => toolResult(event.result),
  "approval.requested": (event) => held(event.call),
  "approval.decided": (event) => decided(event.call.id, event.approved, event.reason),
  "turn.finished": (event) => {
    const end = event.result.end;
    let text = `turn ${event.turn} ended: ${end.reason}`;
    if (end.reason === "failed") text += ` (${end.code}: ${end.detail})`;
    if (end.reason === "awaiting_approval") text += " — decide the held calls above";
    add(element("div", "end", text));
    setRunning(false);
    refreshSessions();
  },
};

function piece(attempt, kind, text) {
  const key = `${attempt}:${kind}:${open.lastKind === `${attempt}:${kind}` ? open.pieceNo : ++open.pieceNo}`;
  open.lastKind = `${attempt}:${kind}`;
  let node = open.items.get(key);
  if (!node) {
    if (kind === "text") {
      node = add(element("div", "assistant", ""));
    } else {
      node = add(element("details", "thinking"));
      node.append(element("summary", "", "thinking"), element("pre", "", ""));
    }
    open.items.set(key, node);
  }
  appendText(kind === "text" ? node : node.querySelector("pre"), text);
}

function toolBox(call) {
  let box = open.items.get(`call:${call.id}`);
  if (!box) {
    box = add(element("div", "tool"));
    box.dataset.call = call.id;
    const head = element("div");
    head.append(element("strong", "", call.name), element("span", "state", ""));
    box.append(head, element("code", "", JSON.stringify(call.arguments, null, 1)));
    open.items.set(`call:${call.id}`, box);
  }
  open.lastKind = `call:${call.id}`;
  return box;
}

function toolCall(attempt, call) {
  // a retry's call is one of its own, even of a void call's id (a box of its own)
  const known = open.items.get(`call:${call.id}`);
  if (known && known.classList.contains("void")) open.items.delete(`call:${call.id}`);
  open.items.set(`${attempt}:call:${call.id}`, toolBox(call));
}

function toolResult(result) {
  const box = toolBox({ id: result.tool_call_id, name: result.tool_name, arguments: {} });
  box.querySelector(".state").textContent = "";
  box.querySelector(".held")?.remove();
  const shown = element("div", result.is_error ? "result error" : "result", textOf(result.content));
  box.querySelector(".result")?.remove();
  box.append(shown);
}

function held(call) {
  const box = toolBox(call);
  if (box.querySelector(".held") || box.querySelector(".decision")) return;
  box.querySelector(".state").textContent = " waits for your approval";
  const row = element("div", "held");
  const approve = element("button", "approve", "approve");
  const reject = element("button", "reject", "reject");
  const reason = element("input");
  reason.placeholder = "reason (optional)";
  approve.type = reject.type = "button";
  const choose = (approved) => {
    // once: a second click while the first is sent was refused as decided already
    row.dataset.sending = "1";
    heldControls(row, true);
    decide(call.id, approved, reason.value).finally(() => {
      delete row.dataset.sending;
      heldControls(row, Boolean(open && open.running));
    });
  };
  approve.onclick = () => choose(true);
  reject.onclick = () => choose(false);
  row.append(approve, reject, reason);
  heldControls(row, open.running);
  box.append(row);
}

function decided(callId, approved, reason) {
  const box = open.items.get(`call:${callId}`);
  if (!box) return;
  box.querySelector(".held")?.remove();
  box.querySelector(".decision")?.remove();
  box.querySelector(".state").textContent = "";
  const text = approved ? "approved" : `rejected${reason ? `: ${reason}` : ""}`;
  box.append(element("div", "decision", text));
}

async function decide(callId, approved, reason) {
  const session = open;
  showError("");
  let refused = null;
  try {
    // the id in the body: a path cannot hold "." or ".." (URLs drop them)
    await api("POST", sessionPath(session.id, "/approvals"), {
      call_id: callId,
      approved,
      reason,
    });
    if (open === session) decided(callId, approved, reason);
  } catch (error) {
    refused = error; // perhaps decided already: in another tab, or before a reload
  }
  try {
    await runDecided(session, callId, refused ? "" : reason);
    if (refused && open === session && !decidedHere(callId)) showError(refused.message);
  } catch (error) {
    if (open === session) showError(error.message);
  }
}

// A decision is in the event stream only once the turn that runs it starts: the
// server's state says which held calls are decided (here, in another tab, or
// before a reload) and whether any still waits. When none does, the turn that
// runs them is started (a 409: another tab started it, or a turn runs).
async function runDecided(session, callId, reason) {
  const state = await api("GET", sessionPath(session.id));
  if (open !== session) return;
  for (const call of state.decided_approvals) {
    if (!decidedHere(call.id)) decided(call.id, call.approved, call.id === callId ? reason : "");
  }
  if (state.pending_approvals.length || state.running_turn !== null) return;
  if (!state.decided_approvals.length) return;
  try {
    await api("POST", sessionPath(session.id, "/turns"), {}); // run what was decided
  } catch (error) {
    if (error.status !== 409) throw error;
  }
}

function decidedHere(callId) {
  const box = open.items.get(`call:${callId}`);
  return Boolean(box && box.querySelector(".decision"));
}

// -- the controls
async function send(event) {
  event.preventDefault();
  const session = open;
  const text = $("message").value;
  if (!session || !text.trim() || sending) return;
  sending = true;
  $("send").disabled = $("message").readOnly = true; // the box holds what is sent
  showError("");
  try {
    await api("POST", sessionPath(session.id, "/turns"), { message: text });
    $("message").value = ""; // sent (to `session`, whichever is open now)
    if (open === session) {
      follow = true; // the message and its answer in view, wherever the reader was
      show();
      listen();
    }
    refreshSessions();
  } catch (error) {
    showError(open === session ? error.message : `not sent to ${session.id}: ${error.message}`);
  } finally {
    sending = false;
    $("send").disabled = !open;
    $("message").readOnly = false;
  }
}

async function cancelTurn() {
  // one cancel under way at a time: another, once the turn has ended, is a 409
  const session = open;
  if (!session) return;
  $("cancel").disabled = true;
  try {
    await api("POST", sessionPath(session.id, "/cancel"));
  } catch (error) {
    if (open === session) showError(error.message);
  } finally {
    $("cancel").disabled = false;
  }
}

function usable(value) {
  // as the server takes it: a header can carry nothing else (fetch throws)
  if (/^[\x21-\x7e]{16,4096}$/.test(value)) return true;
  showError("a token is 16 to 4096 printable ASCII characters, no space");
  return false;
}

function useToken(event) {
  event.preventDefault();
  const value = $("token").value;
  $("token").value = "";
  if (!usable(value)) return;
  keepToken(value);
  reopen();
}

function reopen() {
  // with a new token: the sessions and the open session asked for again
  $("login").hidden = true;
  showError("");
  const id = open && open.id;
  if (open && open.source) open.source.abort();
  open = null;
  if (id) openSession(id);
  else refreshSessions();
}

function tokenFromHash() {
  // `#token=...`: kept, then taken out of the address (and of this history entry)
  if (!location.hash.startsWith("#token=")) return false;
  let given = "";
  try {
    given = decodeURIComponent(location.hash.slice("#token=".length));
  } catch (_) {
    given = "";
  }
  history.replaceState(null, "", location.pathname + location.search);
  if (!given) {
    showError("the token in the address is not valid percent-encoding");
    return false;
  }
  if (!usable(given)) return false;
  keepToken(given);
  return true;
}

function fromHash() {
  if (tokenFromHash()) {
    reopen(); // given while the page was open
    return;
  }
  let id;
  try {
    id = decodeURIComponent(location.hash.slice(1));
  } catch (_) {
    showError("the address after # is no session id (it is not valid percent-encoding)");
    return;
  }
  if (id && (!open || open.id !== id)) openSession(id);
}

tokenFromHash(); // before anything is asked of the server, or shown

document.addEventListener("DOMContentLoaded", () => {
  $("composer").addEventListener("submit", send);
  $("login").addEventListener("submit", useToken);
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.ctrlKey) send(event);
  });
  $("cancel").addEventListener("click", cancelTurn);
  $("refresh").addEventListener("click", refreshSessions);
  $("transcript").addEventListener("scroll", scrolled);
  $("new-session").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("new-session-id").value.trim();
    if (id) location.hash = encodeURIComponent(id);
    $("new-session-id").value = "";
  });
  window.addEventListener("hashchange", fromHash);
  refreshSessions();
  fromHash();
});
