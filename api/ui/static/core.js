// qkv's web page, the shared part: plain browser JavaScript, no build step, no library
// (collections.js and views.js follow it). Every call goes to
// the same /v1 API as any client; the API key, when the server needs one, is typed once and
// kept in this tab's sessionStorage (never in a URL). Text from the server is always put in
// the page as text (textContent), never as HTML.
"use strict";

const CONFIG = JSON.parse(document.getElementById("qkv-config").textContent);
const KEY = "qkv-api-key";
const $ = (sel, root = document) => root.querySelector(sel);

// ---------- DOM and the API ----------
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "style") el.setAttribute("style", v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) {
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  return el;
}

class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
  toString() {
    return this.status ? `${this.status} ${this.type || "error"}: ${this.message}`
      : this.message;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const raw = body instanceof Blob; // a file sent as it is
  if (body !== undefined) headers["Content-Type"] = raw ? "application/octet-stream"
    : "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers,
      body: body === undefined || raw ? body : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    // OpenAI's {error: {message, type, code}} under /v1/ (code: qkv's error type), TEI's
    // {error, error_type} elsewhere
    const err = data && data.error;
    const nested = err && typeof err === "object";
    const message = (nested ? err.message : err) || text || resp.statusText;
    const type = (nested ? err.code || err.type : data && data.error_type) || "";
    let full = String(message);
    const retry = resp.headers.get("Retry-After");
    if (retry) full += ` (retry after ${retry} s)`;
    if (resp.status === 401) showKeyForm(true);
    throw new ApiError(resp.status, type, full);
  }
  return data;
}

function showError(e) {
  $("#error-text").textContent = e instanceof ApiError ? e.toString() : String(e);
  $("#error").hidden = false;
}
function clearError() { $("#error").hidden = true; }

// run an action with its button disabled; errors go to the banner
async function busy(button, fn) {
  if (button) button.disabled = true;
  try {
    clearError();
    return await fn();
  } catch (e) {
    showError(e);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

// a form whose submit runs fn(form) with its submit button disabled
function onSubmit(form, fn) {
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(form.querySelector("button[type=submit]"), () => fn(form));
  });
}

// ---------- the API key ----------
// What the key in use may do (GET /v1/keys/me): a read-only key sees no Drop button, no
// create or upload form
// ME is the pending or settled answer for the key in use; a new key starts a new one, and an
// answer for a key no longer in use does not touch the page
let ME = null;
async function whoami() {
  if (!ME) ME = api("GET", "/v1/keys/me").catch(() => ({ open: false, scope: "read" }));
  const asked = ME;
  const me = await asked;
  if (asked !== ME) return me;
  const bound = me.tenants ? ` · tenant ${me.tenants.join(", ")}` : "";
  $("#key-scope").textContent = me.open || !me.id ? "" : `key ${me.id}: ${me.scope}${bound}`;
  return me;
}
const mayWrite = (me) => me.scope === "write" || me.scope === "admin";
function showKeyForm(show) {
  $("#key-form").hidden = !show;
  if (show) $("#key-input").focus();
}
function initKey(reload) {
  $("#key-button").hidden = !CONFIG.key_required;
  $("#key-button").addEventListener("click", () => showKeyForm($("#key-form").hidden));
  $("#key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("#key-input").value);
    ME = null;
    $("#key-input").value = "";
    showKeyForm(false);
    clearError();
    reload();
  });
  $("#key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    ME = null;
    $("#key-input").value = "";
  });
  $("#error-close").addEventListener("click", clearError);
  if (CONFIG.key_required && !sessionStorage.getItem(KEY)) showKeyForm(true);
}

// ---------- shared pieces ----------
const fmt = (x, digits = 3) => (typeof x === "number" ? x.toFixed(digits) : "–");
const enc = encodeURIComponent;

// each select keeps its choice, else takes the collection this tab used last, else the
// demo's (docs), else the first
async function fillCollectionSelects() {
  const { collections } = await api("GET", "/v1/collections");
  for (const select of document.querySelectorAll(".collection-select")) {
    const prefer = [select.value, sessionStorage.getItem("qkv-collection"),
      CONFIG.demo_collection];
    const names = collections.filter((c) => !select.dataset.decoder || c.decoder)
      .map((c) => c.name);
    select.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
    const keep = prefer.find((n) => n && names.includes(n));
    if (keep) select.value = keep;
  }
  return collections;
}

function rememberCollection(name) { sessionStorage.setItem("qkv-collection", name); }

// text cut into pieces, each token's piece shaded by its weight over the text's largest
function shaded(segments) {
  const top = Math.max(1e-12, ...segments.map((s) => s.weight || 0));
  return segments.map((s) => (s.weight === null ? s.text
    : h("span", { class: "tok", style: `--w:${(s.weight / top).toFixed(3)}`,
      "data-weight": s.weight, title: `pooling weight ${s.weight.toFixed(4)}` }, s.text)));
}

function metadataList(meta) {
  const entries = Object.entries(meta || {});
  if (!entries.length) return null;
  return h("dl", { class: "meta" }, entries.map(([k, v]) => h("div", {},
    h("dt", {}, k), h("dd", {}, typeof v === "string" ? v : JSON.stringify(v)))));
}

function weightBars(list, hits) {
  list.replaceChildren(...hits.map((hit, i) => h("li", { class: "bar-row", "data-id": hit.id },
    h("span", { class: "label", title: hit.text || hit.id }, `${i + 1}. ${hit.id} — `,
      hit.text || ""),
    h("span", { class: "bar" }, h("span", { class: "fill",
      style: `width:${(100 * hit.weight).toFixed(2)}%` })),
    h("span", { class: "num" }, fmt(hit.weight)))));
}

function searchBody(form, extra = {}) {
  const body = { query: form.query.value, top_k: Number(form.top_k.value), ...extra };
  if (form.mode && form.mode.value) body.mode = form.mode.value;
  return body;
}

