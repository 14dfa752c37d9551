// The session page: the sessions, and one session's transcript live from its
// event stream (EventSource: on a reconnect it sends Last-Event-ID, and the
// server resumes exactly after it). Everything the model or a tool wrote is
// put in as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let open = null; // the open session: {id, source, items, running}
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

async function api(method, path, body) {
  // the header says this page sent it: with the token as a cookie, the server
  // takes a POST only with it (a form on another page cannot send it)
  const init = { method, headers: { "x-trio-agent-page": "1" } };
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
  if (!answer.ok) throw new Error((value && value.error) || `HTTP ${answer.status}`);
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
    return [];
  }
}

// -- a session
async function openSession(id) {
  if (open && open.source) open.source.close();
  open = { id, source: null, items: new Map(), running: false, pieceNo: 0, lastKind: "" };
  $("title").textContent = id;
  pending.clear();
  $("transcript").replaceChildren();
  follow = true;
  lastTop = 0;
  $("message").disabled = $("send").disabled = false;
  setRunning(false);
  showError("");
  const known = await refreshSessions();
  if (open.id !== id) return;
  if (known.includes(id)) listen();
  else $("status").textContent = "new session: send a message to start it";
}

function listen() {
  const session = open;
  if (session.source) return;
  session.source = new EventSource(sessionPath(session.id, "/events"));
  session.source.onmessage = (message) => {
    if (open !== session) return;
    render(JSON.parse(message.data).event);
  };
  session.source.onerror = () => {
    if (open !== session) return;
    if (session.source.readyState !== EventSource.CLOSED) {
      $("status").textContent = "reconnecting…";
      return;
    }
    // refused (not a 200 of text/event-stream): the browser tries no more
    session.source = null;
    $("status").textContent = "disconnected";
    showError("the event stream was refused; reload the page to try again");
    refreshSessions(); // a 401 shows the token form
  };
  session.source.onopen = () => {
    if (open === session) $("status").textContent = session.running ? "running" : "idle";
  };
}

function setRunning(running) {
  if (open) open.running = running;
  $("cancel").hidden = !running;
  $("status").textContent = running ? "running" : "idle";
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
    else if (chunk.type === "tool_call") toolCall(chunk);
  },
  "attempt.failed": (event) => {
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

function toolCall(call) {
  toolBox(call);
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
    approve.disabled = reject.disabled = reason.disabled = true;
    decide(call.id, approved, reason.value).finally(() => {
      approve.disabled = reject.disabled = reason.disabled = false;
    });
  };
  approve.onclick = () => choose(true);
  reject.onclick = () => choose(false);
  row.append(approve, reject, reason);
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
  try {
    await api("POST", sessionPath(session.id, `/approvals/${encodeURIComponent(callId)}`), {
      approved,
      reason,
    });
    decided(callId, approved, reason);
    if (!$("transcript").querySelector(".held")) {
      await api("POST", sessionPath(session.id, "/turns"), {}); // run what was decided
    }
  } catch (error) {
    showError(error.message);
  }
}

// -- the controls
async function send(event) {
  event.preventDefault();
  const text = $("message").value;
  if (!open || !text.trim()) return;
  showError("");
  try {
    await api("POST", sessionPath(open.id, "/turns"), { message: text });
    $("message").value = "";
    listen();
    refreshSessions();
  } catch (error) {
    showError(error.message);
  }
}

async function cancelTurn() {
  try {
    await api("POST", sessionPath(open.id, "/cancel"));
  } catch (error) {
    showError(error.message);
  }
}

function useToken(event) {
  event.preventDefault();
  // A cookie, as EventSource can send no header; SameSite=Strict: no other site's request carries it.
  document.cookie = `trio_agent_token=${encodeURIComponent($("token").value)}; Path=/; SameSite=Strict`;
  $("token").value = "";
  $("login").hidden = true;
  showError("");
  const id = open && open.id;
  open = null;
  if (id) openSession(id);
  else refreshSessions();
}

function fromHash() {
  let id;
  try {
    id = decodeURIComponent(location.hash.slice(1));
  } catch (_) {
    showError("the address after # is no session id (it is not valid percent-encoding)");
    return;
  }
  if (id && (!open || open.id !== id)) openSession(id);
}

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
