// qkv's web page, the collections view: list, create, drop, and the upload of a JSONL or CSV
// file read in the browser and sent in batches of upserts (core.js loads first).
"use strict";

// ---------- Collections ----------
// A load started earlier (e.g. under the key used before) that answers later draws nothing:
// only the newest load draws, and the table names the scope it was drawn for (data-scope)
let collectionsLoad = 0;
async function loadCollections() {
  const load = ++collectionsLoad;
  const collections = await fillCollectionSelects();
  const me = await whoami();
  if (load !== collectionsLoad) return;
  const admin = me.scope === "admin";
  $("#create-form").closest("section").hidden = !admin;
  $("#upload-form").closest("section").hidden = !mayWrite(me);
  const details = await Promise.all(collections.map((c) =>
    api("GET", `/v1/collections/${enc(c.name)}`).catch(() => ({}))));
  // A collection past what its backend serves fast says so beside its count
  const count = (d) => d.size_warning
    ? h("span", { class: "size-warning", title: d.size_warning }, `${d.count} ⚠`)
    : (d.count ?? "–");
  const rows = collections.map((c, i) => h("tr", { "data-name": c.name },
    h("td", {}, h("strong", {}, c.name)), h("td", { class: "count" }, count(details[i])),
    h("td", {}, c.encoder ? c.encoder.name : "–"), h("td", {}, c.dim),
    h("td", {}, c.hybrid ? "yes" : "no"), h("td", {}, c.decoder || "–"),
    h("td", { class: "backend" }, c.backend || "–"),
    h("td", {}, admin ? [
      h("button", { class: "adapt", type: "button",
        title: "Adapt the encoder to this collection's documents (no labels), re-index them "
          + "and swap it in; searches keep answering meanwhile",
        onclick: (ev) => adaptCollection((c.aliases || [])[0] || c.name, ev.target) }, "Adapt"),
      " ", h("button", { class: "danger drop", type: "button",
        onclick: (ev) => dropCollection(c.name, ev.target) }, "Drop"),
      h("span", { class: "adapt-status", "aria-live": "polite" },
        adaptSaid[c.name] || (c.aliases || []).map((a) => adaptSaid[a] || "").join(""))]
      : "–")));
  if (load !== collectionsLoad) return;
  $("#collections tbody").replaceChildren(...rows);
  $("#collections").dataset.scope = me.scope;
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

// Adapt: POST .../adapt, then its job's phase and progress until it ends
const adaptSaid = {};  // name -> how its last adapt ended (kept across re-renders)

async function adaptCollection(name, button) {
  if (!window.confirm(`Adapt the encoder to "${name}"? The job takes about 9 minutes on this `
    + "server (training, then re-indexing the collection); searches keep answering meanwhile.")) {
    return;
  }
  const status = button.parentElement.querySelector(".adapt-status");
  await busy(button, async () => {
    let job = await api("POST", `/v1/collections/${enc(name)}/adapt`, {});
    const ended = ["done", "skipped", "rejected", "failed", "interrupted"];
    while (!ended.includes(job.phase)) {
      status.textContent = ` ${job.phase} ${Math.round(job.progress * 100)} %`;
      await new Promise((ok) => setTimeout(ok, 2000));
      job = await api("GET", `/v1/jobs/${enc(job.id)}`);
    }
    adaptSaid[name] = ` ${job.phase}: ${job.reason || ""}`;
    await loadCollections();
  });
}

function initCollections() {
  onSubmit($("#create-form"), async (create) => {
    const body = { name: create.name.value };
    if (create.hybrid.value) body.hybrid = create.hybrid.value === "true";
    const made = await api("POST", "/v1/collections", body);
    create.reset();
    rememberCollection(made.name);
    await loadCollections();
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
  const nested = doc.metadata.metadata;  // the API's shape: {"id", "text", "metadata": {...}}
  if (nested && typeof nested === "object" && !Array.isArray(nested)) {
    delete doc.metadata.metadata;
    Object.assign(doc.metadata, nested);
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

// A document file (text, Markdown, HTML, PDF): sent as it is, read by the server as qkv
// index reads it, one document named by the file
const DOCUMENT_FILE = /\.(txt|text|md|markdown|html?|pdf)$/i;

async function sendBatches() {
  const resume = $("#upload-resume");
  resume.hidden = true;
  while (upload.done < upload.docs.length) {
    const next = upload.docs[upload.done];
    let batch = [next];
    if (!(next instanceof File)) {
      batch = upload.docs.slice(upload.done, upload.done + CONFIG.upload_batch);
      const file = batch.findIndex((d) => d instanceof File);
      if (file >= 0) batch = batch.slice(0, file);
    }
    try {
      if (next instanceof File) {
        await api("POST", `/v1/collections/${enc(upload.collection)}/files?file=`
          + `${encodeURIComponent(next.name)}`, next);
      } else {
        await api("POST", `/v1/collections/${enc(upload.collection)}/documents`,
          { documents: batch });
      }
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
  onSubmit($("#upload-form"), async (form) => {
    const files = [...form.file.files];
    const fields = { id: form.id_field.value, text: form.text_field.value,
      value: form.value_field.value || null };
    const docs = [], skipped = [];
    for (const file of files) {
      if (DOCUMENT_FILE.test(file.name)) {
        docs.push(file);
        continue;
      }
      const where = files.length > 1 ? `${file.name} ` : "";
      for (const rec of readRecords(file.name, await file.text())) {
        const doc = rec.error || toDocument(rec.row, fields);
        if (typeof doc === "string") skipped.push(`${where}line ${rec.line}: ${doc}`);
        else docs.push(doc);
      }
    }
    const file = { name: files.map((f) => f.name).join(", ") };
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
  $("#upload-resume").addEventListener("click", (ev) => busy(ev.target, sendBatches));
}

