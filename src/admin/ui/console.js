// The idemproxy operator's console: a client of the admin API on its own origin.
// Everything from the ledger is rendered as text (textContent), never as markup.
// The admin token, when the API asks for one, lives in this tab's sessionStorage and
// travels only in the Authorization header.
"use strict";

const TOKEN_KEY = "idemproxy.admin-token";
const POLL_MS = 3000;
const PAGE_SIZE = 25;
const BODY_SHOWN = 256 * 1024;
// The states in the order a person attends to them.
const STATES = ["prepared", "unknown", "in_flight", "failed", "succeeded"];
const $ = (id) => document.getElementById(id);

const view = { name: "", id: "", pages: [""], filters: {}, responseSha: null, timer: null, correcting: false, resolveVerb: "resolve" };

class NeedToken extends Error {}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// Builds an element; strings and numbers among the children become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(id, visible) {
  $(id).hidden = !visible;
}

// One admin call. A 401 from the API itself (not a stored response replayed) asks for the token.
async function api(path, method, body) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method: method || "GET",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  if (resp.status === 401 && !resp.headers.get("idem-operation-id")) {
    askToken(token() ? "The proxy refused that token." : "");
    throw new NeedToken();
  }
  return resp;
}

async function json(path, method, body) {
  const resp = await api(path, method, body);
  const value = await resp.json().catch(() => null);
  if (!resp.ok) {
    const detail = value && (value.detail || value.title);
    throw new Error(detail || "The proxy answered " + resp.status + ".");
  }
  return value;
}

function askToken(message) {
  show("loading", false);
  sessionStorage.removeItem(TOKEN_KEY);
  for (const id of ["list-view", "op-view"]) show(id, false);
  show("login", true);
  setError(message);
  $("token").focus();
}

// An error from the periodic refresh goes away by itself with the next good refresh.
function setError(message, fromPoll) {
  $("error").textContent = message || "";
  $("error").dataset.poll = fromPoll ? "1" : "";
  show("error", Boolean(message));
}

function setStatus(message) {
  $("status").textContent = message;
}

function encodeId(id) {
  return encodeURIComponent(id);
}

// Every time on the page is UTC in ISO 8601 (2026-12-04T18:28:47Z), whatever the browser's
// own time zone: the same instant reads the same in the console, the CLI and the logs.
function when(ts) {
  if (!ts) return "—";
  return ts.replace(/\.\d+Z$/, "Z");
}

function now() {
  return when(new Date().toISOString());
}

function age(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

function badge(state) {
  return el("span", { class: "state state-" + state }, state);
}

// ---- the list ----------------------------------------------------------------------------

function readFilters() {
  const query = new URLSearchParams(location.hash.replace(/^#\/?\??/, ""));
  return {
    state: query.get("state") || "",
    provider: query.get("provider") || "",
    route: query.get("route") || "",
  };
}

function filterHash(filters) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
  const text = query.toString();
  return "#/" + (text ? "?" + text : "");
}

async function renderSummary() {
  const stats = await json("/stats");
  const items = STATES.map((state) =>
    el("a", { href: filterHash({ state }), class: "count" }, badge(state), " ", el("b", {}, stats.by_state[state] || 0)));
  const oldest = (label, o) => el("span", { class: "oldest" }, "oldest " + label + ": " + (o ? age(o.age_seconds) : "none"));
  $("summary").replaceChildren(...items, oldest("unknown", stats.oldest_unknown), oldest("in flight", stats.oldest_in_flight));
}

async function renderList() {
  const f = view.filters;
  const after = view.pages[view.pages.length - 1];
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  for (const key of ["state", "provider", "route"]) if (f[key]) query.set(key, f[key]);
  if (after) query.set("after", after);
  const page = await json("/ops?" + query.toString());
  const rows = page.ops.map((op) =>
    el("tr", {},
      el("td", {}, badge(op.state), op.approval === "pending" ? el("span", { class: "tag" }, "needs approval") : null),
      el("td", {}, el("a", { href: "#/op/" + encodeId(op.operation_id), class: "op-link" }, op.operation_id)),
      el("td", {}, op.provider),
      el("td", {}, op.route),
      el("td", {}, when(op.created_at)),
      el("td", {}, when(op.updated_at))));
  $("ops").tBodies[0].replaceChildren(...rows);
  show("ops-empty", rows.length === 0);
  view.next = page.next;
  $("page-older").disabled = !page.next;
  $("page-newer").disabled = view.pages.length < 2;
  await renderSummary();
}

// ---- one operation -----------------------------------------------------------------------

function fact(term, value) {
  return [el("dt", {}, term), el("dd", {}, value === null || value === undefined ? "—" : value)];
}

async function renderOperation() {
  const op = await json("/ops/" + encodeId(view.id));
  $("op-title").textContent = op.operation_id;
  const tags = [badge(op.state), " ", el("span", { class: "tag" }, "approval: " + op.approval), " ", el("span", { class: "tag" }, op.effect)];
  $("op-state").replaceChildren(...tags);
  $("op-facts").replaceChildren(
    ...fact("Provider", op.provider), ...fact("Route", op.route),
    ...fact("Idempotency key", el("code", {}, op.idempotency_key)),
    ...fact("Attempts", op.attempts), ...fact("First dispatch", when(op.first_dispatched_at)),
    ...fact("Created", when(op.created_at)), ...fact("Updated", when(op.updated_at)),
    ...fact("Provider request ID", op.provider_request_id), ...fact("Error", op.error),
    ...fact("Replays", op.replays ? op.replays.count : 0), ...fact("Fingerprint", el("code", {}, op.fingerprint)));
  $("op-events").replaceChildren(...op.events.map((e) =>
    el("li", {}, el("time", {}, when(e.at)), " ", el("b", {}, e.kind), e.attempt ? " (attempt " + e.attempt + ")" : "", e.detail ? ": " + e.detail : "")));
  renderDecisions(op);
  await renderResponse(op);
}

function renderDecisions(op) {
  const prepared = op.state === "prepared";
  show("approval", prepared);
  show("approve-form", prepared && op.approval === "pending");
  renderOperator(op);
  renderResolve(op);
  if (!prepared) return;
  $("approval-note").textContent = op.approval === "approved"
    ? "Approved: the agent's next request for it sends it. It can still be rejected until then."
    : "Nothing has been sent. Approving lets the agent's next request send it; rejecting ends it for good.";
  $("approval-fields").tBodies[0].replaceChildren(...fieldRows(op.approval_request, "approval_show"));
}

// The rows of a shown request's fields (masked and missing ones marked), or why there are none.
function fieldRows(request, list) {
  const rows = [];
  if (request) {
    for (const [name, value] of Object.entries(request.fields)) {
      const masked = request.masked.includes(name);
      rows.push(el("tr", {}, el("th", {}, name), el("td", { class: masked ? "masked" : "" }, value)));
    }
    for (const name of request.missing) rows.push(el("tr", {}, el("th", {}, name), el("td", { class: "missing" }, "(not in the request)")));
  } else {
    rows.push(el("tr", {}, el("td", {}, "This route lists no parameters to show (" + list + ").")));
  }
  return rows;
}

// An unknown or in-flight operation: its request's operator_show fields, the agents' requests
// held meanwhile, and the commands that settle it.
function renderOperator(op) {
  const deciding = op.state === "unknown" || op.state === "in_flight";
  show("operator", deciding);
  if (!deciding) return;
  $("operator-fields").tBodies[0].replaceChildren(...fieldRows(op.operator_request, "operator_show"));
  const held = op.held_retries;
  $("held").textContent = held
    ? "Held retries: " + held.count + " (first " + when(held.first_at) + ", last " + when(held.last_at) + "), nothing sent."
    : "Held retries: none since the proxy started.";
  show("commands", Boolean(op.resolve_commands));
  $("resolve-commands").textContent = (op.resolve_commands || []).join("\n");
}

// Resolve an unknown operation, or correct a resolution an operator made (re-resolve).
function renderResolve(op) {
  const unknown = op.state === "unknown";
  show("resolve", unknown || op.re_resolvable);
  view.resolveVerb = unknown ? "resolve" : "re-resolve";
  $("resolve-title").textContent = unknown ? "Outcome unknown: resolve it" : "Resolved by an operator";
  $("resolve-note").textContent = unknown
    ? "Check with the provider whether the effect happened, then record what you found. The operation is held until you do."
    : "An operator recorded this outcome. If it was wrong, correct it: what you record now replaces it for every later request.";
  show("correct-open", !unknown && !view.correcting);
  show("resolve-form", unknown || view.correcting);
  $("resolve-submit").textContent = unknown ? "Resolve" : "Correct";
}

async function renderResponse(op) {
  const box = $("op-response");
  if (!op.response) {
    view.responseSha = null;
    box.replaceChildren(el("p", {}, "None stored."));
    return;
  }
  if (view.responseSha === op.response.body_sha256) return;
  const resp = await api("/ops/" + encodeId(op.operation_id) + "/response");
  const text = await resp.text();
  view.responseSha = op.response.body_sha256;
  const meta = el("p", {}, "Status ", el("b", {}, op.response.status), ", ", op.response.body_bytes, " bytes, SHA-256 ", el("code", {}, op.response.body_sha256));
  box.replaceChildren(meta, el("pre", { class: "body" }, pretty(text)));
}

// Re-indents JSON text without re-writing its numbers or strings; other text as it is.
function pretty(text) {
  if (text.length > BODY_SHOWN) return text.slice(0, BODY_SHOWN) + "\n… (cut; the whole body is at /ops/{id}/response)";
  try { JSON.parse(text); } catch (_) { return text; }
  let out = "", depth = 0, inString = false, escaped = false;
  const newline = () => "\n" + "  ".repeat(depth);
  for (const c of text) {
    if (inString) {
      out += c;
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === "\"") inString = false;
    } else if (c === "\"") { inString = true; out += c; }
    else if (c === "{" || c === "[") { depth++; out += c + newline(); }
    else if (c === "}" || c === "]") { depth--; out += newline() + c; }
    else if (c === ",") out += c + newline();
    else if (c === ":") out += ": ";
    else if (!/\s/.test(c)) out += c;
  }
  return out.replace(/([{[])\n\s*([}\]])/g, "$1$2");
}

// ---- decisions ---------------------------------------------------------------------------

function confirmWith(text, action) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = action;
  return new Promise((resolve) => {
    const done = (yes) => {
      $("confirm-ok").onclick = $("confirm-cancel").onclick = null;
      dialog.close();
      resolve(yes);
    };
    $("confirm-ok").onclick = () => done(true);
    $("confirm-cancel").onclick = () => done(false);
    dialog.oncancel = () => done(false);
    dialog.showModal();
  });
}

// One decision, confirmed first. A refusal of a resolution is shown in its form.
async function decide(verb, body, question) {
  if (!(await confirmWith(question, "Yes, " + verb))) return;
  const inForm = verb === "resolve" || verb === "re-resolve";
  try {
    const op = await json("/ops/" + encodeId(view.id) + "/" + verb, "POST", body);
    setStatus(verb + ": done; the operation is now " + op.state + ".");
    setError("");
    show("resolve-error", false);
    view.correcting = false;
    await refresh();
  } catch (e) {
    if (e instanceof NeedToken) return;
    if (!inForm) return setError(e.message);
    $("resolve-error").textContent = e.message + " Nothing was recorded.";
    show("resolve-error", true);
  }
}

function resolveBody() {
  const reason = $("resolve-reason").value.trim();
  if ($("outcome-failed").checked) return { outcome: "failed", reason };
  const body = { outcome: "succeeded", status: Number($("resolve-status").value), body: $("resolve-body").value };
  const type = $("resolve-type").value.trim();
  if (type) body.headers = { "content-type": type };
  if (reason) body.reason = reason;
  if ($("resolve-empty").checked) body.empty_body = true;
  return body;
}

function wire() {
  const on = (id, handler) => $(id).addEventListener("submit", (event) => { event.preventDefault(); handler(); });
  on("login-form", () => {
    const value = $("token").value.trim();
    $("token").value = "";
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    show("login", false);
    setError("");
    refresh();
  });
  on("filters", () => {
    const next = filterHash({ state: $("filter-state").value, provider: $("filter-provider").value.trim(), route: $("filter-route").value.trim() });
    if (location.hash === next) route();
    else location.hash = next;
  });
  on("approve-form", () => {
    const reason = $("approve-reason").value.trim();
    decide("approve", reason ? { reason } : {}, "Approve " + view.id + "? The agent's next request for it will send it to the provider.");
  });
  on("reject-form", () => decide("reject", { reason: $("reject-reason").value.trim() }, "Reject " + view.id + " for good? It will never be sent."));
  on("resolve-form", () => {
    const body = resolveBody();
    const what = body.outcome === "failed"
      ? "as failed? The agent's next request will send it again."
      : "as succeeded with status " + body.status + "? Every later request gets this answer.";
    const verb = view.resolveVerb;
    const ask = verb === "resolve"
      ? "Resolve " + view.id + " " + what
      : "Correct the resolution of " + view.id + ": record it " + what + " This replaces the earlier resolution.";
    decide(verb, body, ask);
  });
  $("correct-open").addEventListener("click", () => {
    view.correcting = true;
    show("correct-open", false);
    show("resolve-form", true);
  });
  const outcome = () => {
    show("resolve-success", $("outcome-succeeded").checked);
    $("resolve-reason").required = $("outcome-failed").checked;
  };
  for (const id of ["outcome-succeeded", "outcome-failed"]) $(id).addEventListener("change", outcome);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
  $("page-older").addEventListener("click", () => { if (view.next) { view.pages.push(view.next); refresh(); } });
  $("page-newer").addEventListener("click", () => { if (view.pages.length > 1) { view.pages.pop(); refresh(); } });
  window.addEventListener("hashchange", route);
}

// ---- navigation and polling --------------------------------------------------------------

function route() {
  const hash = location.hash;
  if (hash.startsWith("#/op/")) {
    const id = decodeURIComponent(hash.slice(5));
    if (view.name !== "op" || view.id !== id) {
      view.responseSha = null;
      view.correcting = false;
      show("resolve-error", false);
    }
    Object.assign(view, { name: "op", id });
  } else {
    view.filters = readFilters();
    Object.assign(view, { name: "list", pages: [""] });
    $("filter-state").value = view.filters.state;
    $("filter-provider").value = view.filters.provider;
    $("filter-route").value = view.filters.route;
  }
  refresh();
}

async function refresh() {
  clearTimeout(view.timer);
  if (!$("login").hidden) return;
  if (document.hidden) {
    view.timer = setTimeout(refresh, POLL_MS);
    return;
  }
  try {
    if (view.name === "op") await renderOperation();
    else await renderList();
    show("loading", false);
    show("list-view", view.name === "list");
    show("op-view", view.name === "op");
    setStatus("Updated " + now() + "; refreshes every " + POLL_MS / 1000 + " s.");
    if ($("error").dataset.poll) setError("");
  } catch (e) {
    if (e instanceof NeedToken) return;
    show("loading", false);
    setError(e.message, true);
  }
  view.timer = setTimeout(refresh, POLL_MS);
}

wire();
route();
