// qkv's web page: plain browser JavaScript, no build step, no library. Every call goes to
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
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers,
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, "network", `the server did not answer (${e.message})`);
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    // qkv's {error, error_type}, or OpenAI's {error: {message, type}}
    const err = data && data.error;
    const message = (err && typeof err === "object" ? err.message : err) || text
      || resp.statusText;
    const type = (err && typeof err === "object" ? err.type : data && data.error_type) || "";
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

// ---------- the API key ----------
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
    $("#key-input").value = "";
    showKeyForm(false);
    clearError();
    reload();
  });
  $("#key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    $("#key-input").value = "";
  });
  $("#error-close").addEventListener("click", clearError);
  if (CONFIG.key_required && !sessionStorage.getItem(KEY)) showKeyForm(true);
}

// ---------- shared pieces ----------
const fmt = (x, digits = 3) => (typeof x === "number" ? x.toFixed(digits) : "–");
const enc = encodeURIComponent;

async function fillCollectionSelects() {
  const { collections } = await api("GET", "/v1/collections");
  for (const select of document.querySelectorAll(".collection-select")) {
    const keep = select.value || sessionStorage.getItem("qkv-collection");
    const names = collections.filter((c) => !select.dataset.decoder || c.decoder)
      .map((c) => c.name);
    select.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
    if (names.includes(keep)) select.value = keep;
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

// ---------- Collections ----------
async function loadCollections() {
  const collections = await fillCollectionSelects();
  const counts = await Promise.all(collections.map((c) =>
    api("GET", `/v1/collections/${enc(c.name)}`).then((d) => d.count, () => null)));
  const rows = collections.map((c, i) => h("tr", { "data-name": c.name },
    h("td", {}, h("strong", {}, c.name)), h("td", { class: "count" }, counts[i] ?? "–"),
    h("td", {}, c.encoder ? c.encoder.name : "–"), h("td", {}, c.dim),
    h("td", {}, c.hybrid ? "yes" : "no"), h("td", {}, c.decoder || "–"),
    h("td", {}, h("button", { class: "danger drop", type: "button",
      onclick: (ev) => dropCollection(c.name, ev.target) }, "Drop"))));
  $("#collections tbody").replaceChildren(...rows);
  $("#collections-empty").hidden = collections.length > 0;
}

async function dropCollection(name, button) {
  if (!window.confirm(`Drop collection "${name}" and all its documents? This cannot be undone.`)) {
    return;
  }
  await busy(button, async () => {
    await api("DELETE", `/v1/collections/${enc(name)}`);
    await loadCollections();
  });
}

function initCollections() {
  const create = $("#create-form");
  create.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(create.querySelector("button"), async () => {
      const body = { name: create.name.value };
      if (create.hybrid.value) body.hybrid = create.hybrid.value === "true";
      const made = await api("POST", "/v1/collections", body);
      create.reset();
      rememberCollection(made.name);
      await loadCollections();
    });
  });
  initUpload();
  return loadCollections;
}

// ---------- Upload: the file read here, sent in batches of upserts ----------
function parseCsv(text) {
  const rows = [];
  let row = [], field = "", quoted = false, i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { field += '"'; i += 2; continue; }
      if (ch === '"') { quoted = false; i += 1; continue; }
      field += ch; i += 1; continue;
    }
    if (ch === '"') { quoted = true; } else if (ch === ",") { row.push(field); field = ""; }
    else if (ch === "\n" || ch === "\r") {
      if (ch === "\r" && text[i + 1] === "\n") i += 1;
      row.push(field); rows.push(row); row = []; field = "";
    } else { field += ch; }
    i += 1;
  }
  if (quoted) throw new Error("the CSV file ends inside a quoted field");
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows.filter((r) => r.length > 1 || r[0] !== "");
}

// [{line, row}] or [{line, error}], as qkv index reads JSONL and CSV (header row first)
function readRecords(name, text) {
  if (/\.csv$/i.test(name)) {
    const [header, ...rest] = parseCsv(text.replace(/^\uFEFF/, ""));
    if (!header) return [];
    return rest.map((cells, i) => (cells.length !== header.length
      ? { line: i + 2, error: `${cells.length} fields, the header has ${header.length}` }
      : { line: i + 2, row: Object.fromEntries(header.map((k, j) => [k, cells[j]])) }));
  }
  const out = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    try {
      const row = JSON.parse(line);
      if (row && typeof row === "object" && !Array.isArray(row)) out.push({ line: i + 1, row });
      else out.push({ line: i + 1, error: "not a JSON object" });
    } catch (e) { out.push({ line: i + 1, error: `not JSON (${e.message})` }); }
  });
  return out;
}

function toDocument(row, fields) {
  const id = row[fields.id];
  if (id === undefined || id === null || id === "") return `missing id field "${fields.id}"`;
  if (typeof id !== "string" && !Number.isInteger(id)) return "id must be a string or an integer";
  if (String(id).length > 512) return "id longer than 512 characters";
  const text = row[fields.text];
  if (typeof text !== "string" || !text.trim()) return `missing text field "${fields.text}"`;
  const doc = { id: String(id), text, metadata: {} };
  if (fields.value) {
    const v = row[fields.value];
    if (v !== undefined && v !== null && typeof v !== "string") {
      return `value field "${fields.value}" must be a string`;
    }
    if (v) doc.value = v;
  }
  for (const [k, v] of Object.entries(row)) {
    if (k !== fields.id && k !== fields.text && k !== fields.value) doc.metadata[k] = v;
  }
  return doc;
}

const upload = { docs: [], done: 0, collection: null, skipped: [] };
const rows = (n) => `${n} ${n === 1 ? "row" : "rows"}`;

function uploadProgress(message) {
  const bar = $("#upload-progress");
  bar.hidden = false;
  bar.max = Math.max(1, upload.docs.length);
  bar.value = upload.done;
  $("#upload-status").textContent = message
    || `${upload.done} of ${upload.docs.length} documents uploaded to ${upload.collection}`;
}

async function sendBatches() {
  const resume = $("#upload-resume");
  resume.hidden = true;
  while (upload.done < upload.docs.length) {
    const batch = upload.docs.slice(upload.done, upload.done + CONFIG.upload_batch);
    try {
      await api("POST", `/v1/collections/${enc(upload.collection)}/documents`,
        { documents: batch });
    } catch (e) {
      uploadProgress(`Stopped after ${upload.done} of ${upload.docs.length} documents: the `
        + `batch from document ${upload.done + 1} failed. Resume sends it again.`);
      resume.hidden = false;
      throw e;
    }
    upload.done += batch.length;
    uploadProgress();
  }
  const skipped = upload.skipped.length;
  uploadProgress(`Uploaded ${upload.done} documents to ${upload.collection}`
    + (skipped ? `; ${rows(skipped)} skipped (listed below).` : "."));
  await loadCollections();
}

function initUpload() {
  const form = $("#upload-form");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(form.querySelector("button"), async () => {
      const file = form.file.files[0];
      const fields = { id: form.id_field.value, text: form.text_field.value,
        value: form.value_field.value || null };
      const docs = [], skipped = [];
      for (const rec of readRecords(file.name, await file.text())) {
        const doc = rec.error || toDocument(rec.row, fields);
        if (typeof doc === "string") skipped.push(`line ${rec.line}: ${doc}`);
        else docs.push(doc);
      }
      Object.assign(upload, { docs, done: 0, collection: form.collection.value, skipped });
      rememberCollection(upload.collection);
      const list = $("#upload-skipped");
      list.hidden = skipped.length === 0;
      $("summary", list).textContent = `${rows(skipped.length)} skipped`;
      $("ul", list).replaceChildren(...skipped.map((s) => h("li", {}, s)));
      if (!docs.length) throw new Error(`no documents in ${file.name}`);
      uploadProgress();
      await sendBatches();
    });
  });
  $("#upload-resume").addEventListener("click", (ev) => busy(ev.target, sendBatches));
}

// ---------- Search ----------
const OPS = ["eq", "in", "lt", "lte", "gt", "gte"];

function addFilterRow() {
  const row = h("div", { class: "filter-row" },
    h("input", { name: "key", placeholder: "metadata key", "aria-label": "key" }),
    h("select", { name: "op", "aria-label": "operator" }, OPS.map((o) => h("option", {}, o))),
    h("input", { name: "value", placeholder: "value", "aria-label": "value" }),
    h("button", { type: "button", class: "quiet", "aria-label": "remove condition",
      onclick: () => row.remove() }, "×"));
  $("#filter-editor .filter-rows").append(row);
}

function filterValue(text) {
  try { return JSON.parse(text); } catch (e) { return text; }
}

function readFilter(form) {
  const conds = [];
  for (const row of form.querySelectorAll(".filter-row")) {
    const key = $("[name=key]", row).value.trim();
    if (!key) continue;
    const op = $("[name=op]", row).value;
    const raw = $("[name=value]", row).value.trim();
    const value = op === "in" ? raw.split(",").map((x) => filterValue(x.trim()))
      : filterValue(raw);
    conds.push({ key, op, value });
  }
  if (conds.length === 0) return null;
  return conds.length === 1 ? conds[0] : { [form.filter_join.value]: conds };
}

async function runSearch(form) {
  const collection = form.collection.value;
  rememberCollection(collection);
  const body = searchBody(form);
  const filter = readFilter(form);
  if (filter) body.filter = filter;
  const res = await api("POST", `/v1/collections/${enc(collection)}/search`, body);
  const texts = [body.query, ...res.hits.map((hit) => hit.text || hit.id)];
  let pooled = null;
  try {
    pooled = (await api("POST", "/v1/pooling", { input: texts.slice(0, CONFIG.max_inputs) }))
      .data;
  } catch (e) {
    showError(e); // the results still show, unshaded
  }
  $("#query-tokens").replaceChildren(...(pooled ? shaded(pooled[0].segments) : [body.query]));
  $("#search-summary").textContent = `${res.hits.length} hits in ${collection}, mode `
    + `${res.mode}${res.truncated ? " (query cut to the token limit)" : ""}; weight = `
    + `softmax(cosine / ${res.temperature}) over these hits.`;
  $("#hits").replaceChildren(...res.hits.map((hit, i) => h("li", { class: "hit",
    "data-id": hit.id },
  h("div", { class: "hit-head" }, h("span", { class: "id" }, hit.id),
    h("span", {}, `score ${fmt(hit.score)}`), h("span", {}, `weight ${fmt(hit.weight)}`),
    Object.entries(hit.sources).map(([side, score]) => h("span", { class: `badge ${side}`,
      title: `found by ${side}` }, `${side} ${fmt(score)}`))),
  h("p", { class: "text shaded" }, pooled && pooled[i + 1] ? shaded(pooled[i + 1].segments)
    : hit.text),
  hit.value ? h("p", { class: "value" }, `value: ${hit.value}`) : null,
  metadataList(hit.metadata))));
  $("#search-results").hidden = false;
}

function initSearch() {
  const form = $("#search-form");
  $("#filter-add").addEventListener("click", addFilterRow);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(form.querySelector("button[type=submit]"), () => runSearch(form));
  });
  return fillCollectionSelects;
}

// ---------- Attend ----------
const temperature = () => Number((10 ** Number($("#temperature").value)).toPrecision(3));

async function runAttend(form) {
  const collection = form.collection.value;
  rememberCollection(collection);
  const t = temperature();
  const res = await api("POST", `/v1/collections/${enc(collection)}/attend`,
    searchBody(form, { temperature: t, fields: ["text", "metadata"] }));
  weightBars($("#weights"), res.neighbours);
  const w = res.weights;
  const entropy = -w.reduce((acc, x) => acc + (x > 0 ? x * Math.log(x) : 0), 0);
  const norm = Math.sqrt(res.output.reduce((acc, x) => acc + x * x, 0));
  $("#attend-summary").textContent = `T = ${res.temperature} · ${w.length} neighbours (mode `
    + `${res.mode}) · top weight ${fmt(Math.max(0, ...w))} · entropy ${fmt(entropy, 2)} nats `
    + `(uniform: ${fmt(Math.log(Math.max(1, w.length)), 2)}) · output Σ wᵢvᵢ: `
    + `${res.output.length}-d, norm ${fmt(norm)}`;
  $("#attend-results").hidden = false;
  $("#attend-results").dataset.temperature = String(res.temperature);
}

function initAttend() {
  const form = $("#attend-form");
  const slider = $("#temperature");
  let timer = null;
  const submit = form.querySelector("button[type=submit]");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(submit, () => runAttend(form));
  });
  slider.addEventListener("input", () => {
    $("#temperature-value").textContent = String(temperature());
    clearTimeout(timer);
    if (!$("#attend-results").hidden && form.reportValidity()) {
      timer = setTimeout(() => busy(null, () => runAttend(form)), 120);
    }
  });
  $("#temperature-value").textContent = String(temperature());
  return fillCollectionSelects;
}

// ---------- Generate ----------
function heatmap(table, att, neighbours) {
  const top = att.weights.reduce((m, row) => row.reduce((a, w) => Math.max(a, w), m), 1e-12);
  const segLabel = (s) => (s < 0 ? "query" : `neighbour ${s + 1}`
    + (neighbours[s] ? ` (w ${fmt(neighbours[s].weight, 2)})` : ""));
  const groups = [];
  att.memory_segments.forEach((s, j) => {
    if (!groups.length || groups[groups.length - 1].s !== s) groups.push({ s, n: 0, j });
    groups[groups.length - 1].n += 1;
  });
  const firsts = new Set(groups.map((g) => g.j));
  table.replaceChildren(
    h("thead", {},
      h("tr", {}, h("th", {}), groups.map((g) => h("th", { class: "segment", colspan: g.n,
        title: segLabel(g.s) }, segLabel(g.s)))),
      h("tr", {}, h("th", {}), att.memory_tokens.map((t) => h("th", { class: "mem" }, t)))),
    h("tbody", {}, att.tokens.map((tok, i) => h("tr", {}, h("th", {}, tok),
      att.weights[i].map((w, j) => h("td", { class: firsts.has(j) ? "first" : null,
        style: `--w:${(w / top).toFixed(3)}`, "data-weight": w,
        title: `${tok} ← ${att.memory_tokens[j]} (${segLabel(att.memory_segments[j])}): `
          + `${w.toFixed(3)}` }))))));
  $("#heatmap-max").textContent = fmt(top);
}

async function runGenerate(form) {
  const collection = form.collection.value;
  rememberCollection(collection);
  const res = await api("POST", `/v1/collections/${enc(collection)}/generate`, {
    query: form.query.value, top_k: Number(form.top_k.value), beam: Number(form.beam.value),
    temperature: Number(form.temperature.value), return_attention: true });
  $("#generated").textContent = res.text;
  weightBars($("#generate-weights"), res.neighbours.map((n) => ({ ...n,
    text: n.value ? `${n.text} → ${n.value}` : n.text })));
  if (res.attention) heatmap($("#heatmap"), res.attention, res.neighbours);
  $("#generate-results").hidden = false;
}

function initGenerate() {
  const form = $("#generate-form");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    busy(form.querySelector("button[type=submit]"), () => runGenerate(form));
  });
  return async () => {
    await fillCollectionSelects();
    $("#generate-none").hidden = form.collection.options.length > 0;
  };
}

// ---------- start ----------
const PAGES = { collections: initCollections, search: initSearch, attend: initAttend,
  generate: initGenerate };
const load = PAGES[document.body.dataset.page]();
const reload = () => busy(null, load);
initKey(reload);
if (!CONFIG.key_required || sessionStorage.getItem(KEY)) reload();
