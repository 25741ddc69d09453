// qkv's web page, the search, attend and generate views, and the start of whichever page
// this is (core.js and collections.js load first).
"use strict";

// ---------- Search ----------
const OPS = ["eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "exists", "like"];

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
    // in/nin: a comma list; exists: true unless "false"; like: the prefix pattern as typed
    const value = op === "in" || op === "nin" ? raw.split(",").map((x) => filterValue(x.trim()))
      : op === "exists" ? raw !== "false" : op === "like" ? raw : filterValue(raw);
    conds.push({ key, op, value });
  }
  if (conds.length === 0) return null;
  return conds.length === 1 ? conds[0] : { [form.filter_join.value]: conds };
}

// A demo collection still being filled on a first start answers from what is written so far.
function seedingNote(res) {
  const s = res.seeding;
  return s ? ` Still filling this demo collection: ${s.written} of ${s.of} documents so far.` : "";
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
    + `${res.mode}${res.truncated ? " (query cut to the token limit)" : ""}`
    + `${res.dense_weight == null ? "" : `, dense weight ${fmt(res.dense_weight, 2)} (from `
      + `${res.weight_source === "collection" ? "the collection's calibration"
        : res.weight_source === "request" ? "the request" : "the encoder's default"})`}`
    + `${res.query_weight == null ? "" : `, this query ${fmt(res.query_weight, 2)}`
      + `${res.confidence ? ` (sure of it: dense ${fmt(res.confidence.dense, 2)}, `
        + `BM25 ${fmt(res.confidence.bm25, 2)})` : ""}`}`
    + `; weight = softmax(cosine / ${res.temperature}) over these hits.${seedingNote(res)}`;
  $("#hits").replaceChildren(...res.hits.map((hit, i) => h("li", { class: "hit",
    "data-id": hit.id },
  h("div", { class: "hit-head" }, h("span", { class: "id" }, hit.id),
    h("span", {}, `score ${fmt(hit.score)}`), h("span", {}, `weight ${fmt(hit.weight)}`),
    Object.entries(hit.sources).map(([side, score]) => h("span", { class: `badge ${side}`,
      title: `found by ${side}` }, `${side} ${fmt(score)}`))),
  passageNote(hit),
  h("p", { class: "text shaded" }, matched(pooled && pooled[i + 1]
    ? shaded(pooled[i + 1].segments) : [hit.text], body.query)),
  wholeDocument(collection, hit),
  hit.value ? h("p", { class: "value" }, `value: ${hit.value}`) : null,
  metadataList(hit.metadata))));
  $("#search-results").hidden = false;
}

// A document of a collection with passages: which passage matched, and where it lies
function passageNote(hit) {
  const p = hit.passages && hit.passages[0];
  if (!p || (p.index === 0 && hit.passages.length === 1 && p.start === 0)) return null;
  const more = hit.passages.length > 1 ? ` (and passages ${hit.passages.slice(1)
    .map((x) => x.index + 1).join(", ")})` : "";
  return h("p", { class: "passage-note" }, `best passage: ${p.index + 1}, characters `
    + `${p.start}–${p.end}${more}`);
}

// The query's words where they occur in a hit's text (the shaded tokens of one word, or
// plain text), marked
function matched(pieces, query) {
  const words = new Set((query.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [])
    .filter((w) => w.length > 1));
  if (!words.size) return pieces;
  const out = [];
  let word = [];
  let letters = "";
  const flush = () => {
    const hit = words.has(letters.toLowerCase());
    for (const el of word) {
      if (hit && typeof el !== "string") el.classList.add("match");
      out.push(hit && typeof el === "string" ? h("mark", {}, el) : el);
    }
    word = [];
    letters = "";
  };
  for (const el of pieces) {
    const text = typeof el === "string" ? el : el.textContent;
    if (typeof el === "string" && /\s/u.test(text)) { // plain text: mark word by word
      flush();
      for (const part of text.split(/([\p{L}\p{N}]+)/u)) {
        out.push(words.has(part.toLowerCase()) ? h("mark", {}, part) : part);
      }
      continue;
    }
    if (/^\s/u.test(text)) flush();
    word.push(el);
    letters += text.replace(/[^\p{L}\p{N}]/gu, "");
    if (/[^\p{L}\p{N}]$/u.test(text)) flush();
  }
  flush();
  return out;
}

// A button that shows the whole document in place of its best passage
function wholeDocument(collection, hit) {
  if (!hit.passages || (hit.passages.length === 1 && hit.passages[0].start === 0
      && hit.passages[0].end === (hit.text || "").length)) return null;
  const button = h("button", { type: "button", class: "whole" }, "whole document");
  button.addEventListener("click", async () => {
    try {
      const doc = await api("GET", `/v1/collections/${enc(collection)}/documents/`
        + `${encodeURIComponent(hit.id)}`);
      button.replaceWith(h("pre", { class: "whole-text" }, doc.text));
    } catch (e) {
      showError(e);
    }
  });
  return button;
}

// With no collection to search (a new store, or a key that sees none), the view is a short
// "how to start" panel instead: create, upload, the demo
async function loadSearch() {
  const collections = await fillCollectionSelects();
  const none = collections.length === 0;
  $("#start").hidden = !none;
  $("#search-panel").hidden = none;
  if (none) $("#search-results").hidden = true;
  $("#start-no-admin").hidden = !none || (await whoami()).scope === "admin";
}

function initSearch() {
  const form = $("#search-form");
  $("#filter-add").addEventListener("click", addFilterRow);
  onSubmit(form, runSearch);
  return loadSearch;
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
  onSubmit(form, runAttend);
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
  onSubmit(form, runGenerate);
  return async () => {
    await fillCollectionSelects();
    $("#generate-none").hidden = form.collection.options.length > 0;
  };
}

// ---------- start ----------
const PAGES = { collections: initCollections, search: initSearch, attend: initAttend,
  generate: initGenerate };
const load = PAGES[document.body.dataset.page]();
const reload = () => busy(null, async () => { await whoami(); await load(); });
initKey(reload);
if (!CONFIG.key_required || sessionStorage.getItem(KEY)) reload();
