// vfps admin UI: CSV jobs. Reads the chosen file's header in the browser,
// creates the job through the REST API (the session goes with the
// X-CSRF-Token header), uploads the file where the API says, starts the job,
// and keeps the grid live.
"use strict";

const csrf = () => document.querySelector("meta[name=csrf-token]").content;

// The first record of `text` (RFC 4180 quoting), split at `delimiter`.
function firstRecord(text, delimiter) {
  const fields = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === delimiter) { fields.push(field); field = ""; }
    else if (c === "\n" || c === "\r") break;
    else field += c;
  }
  fields.push(field);
  return fields;
}

function decoderLabel(encoding) {
  return encoding === "utf-16" ? "utf-16le" : encoding;
}

async function showColumns(form) {
  const file = form.elements.file.files[0];
  const box = document.getElementById("job-columns");
  const legend = box.querySelector("legend");
  box.replaceChildren(legend);
  if (!file) return;
  const head = await file.slice(0, 64 * 1024).arrayBuffer();
  let text = new TextDecoder(decoderLabel(form.elements.encoding.value)).decode(head);
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const delimiter = form.elements.delimiter.value || ",";
  const cells = firstRecord(text, delimiter);
  const header = form.elements.has_header_row.checked;
  const namespaces = (form.dataset.namespaces || "").split("\n").filter(Boolean);
  cells.forEach((cell, index) => {
    const id = `job-col-${index}`;
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = header ? `${cell} (column ${index})` : `Column ${index}`;
    const select = document.createElement("select");
    select.id = id;
    select.dataset.source = header ? cell : String(index);
    select.append(new Option("(leave as it is)", ""));
    for (const ns of namespaces) select.append(new Option(ns, ns));
    box.append(label, select);
  });
}

// A session whose roles are due to be confirmed with the identity provider
// is refused by the API (401) until a page renews it: one page request
// (the grid's) renews it, then the call is made again, once.
async function renewed(call) {
  const response = await call();
  if (response.status !== 401) return response;
  await fetch("/ui/csv-jobs/grid", { credentials: "same-origin" });
  return call();
}

async function api(method, url, body) {
  const response = await renewed(() => fetch(url, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  }));
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(answer.message || `HTTP ${response.status}`);
  return answer;
}

async function submit(form, status) {
  const file = form.elements.file.files[0];
  const columnMappings = [...document.querySelectorAll("#job-columns select")]
    .filter((s) => s.value)
    .map((s) => ({ sourceColumn: s.dataset.source, namespace: s.value }));
  if (!file) throw new Error("choose a CSV file");
  if (columnMappings.length === 0) throw new Error("choose a namespace for at least one column");
  status.textContent = "Creating the job…";
  const created = await api("POST", "/v1/csv-jobs", {
    direction: form.elements.direction.value,
    columnMappings,
    delimiter: form.elements.delimiter.value || ",",
    encoding: form.elements.encoding.value,
    hasHeaderRow: form.elements.has_header_row.checked,
    originalFileName: file.name,
  });
  const id = created.job.id;
  const upload = created.upload;
  status.textContent = `Uploading ${file.name}…`;
  const headers = upload.throughVfps ? { "X-CSRF-Token": csrf() } : {};
  const put = await renewed(() => fetch(upload.url, {
    method: upload.method || "PUT",
    headers,
    body: file,
    credentials: upload.throughVfps ? "same-origin" : "omit",
  }));
  if (!put.ok) throw new Error(`the upload failed: HTTP ${put.status}`);
  status.textContent = "Starting…";
  await api("POST", `/v1/csv-jobs/${encodeURIComponent(id)}:start`, {});
  status.textContent = `Job for ${file.name} started.`;
  await refreshGrid();
}

async function refreshGrid() {
  const grid = document.getElementById("jobs-grid");
  if (!grid || document.hidden) return;
  const response = await fetch("/ui/csv-jobs/grid", { credentials: "same-origin" });
  if (!response.ok) return;
  const html = await response.text();
  // Replaced only when it changed, so a focused button is not lost for nothing.
  if (grid.dataset.last !== html) {
    const focused = document.activeElement?.getAttribute("aria-label");
    grid.innerHTML = html;
    grid.dataset.last = html;
    if (focused) grid.querySelector(`[aria-label="${CSS.escape(focused)}"]`)?.focus();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("new-job");
  if (!form) return;
  const status = document.getElementById("job-status");
  for (const name of ["file", "encoding", "delimiter", "has_header_row"]) {
    form.elements[name].addEventListener("change", () => showColumns(form).catch((e) => {
      status.textContent = `The file cannot be read: ${e.message}`;
    }));
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    submit(form, status).catch((e) => { status.textContent = `The job was not started: ${e.message}`; });
  });
  setInterval(() => refreshGrid().catch(() => {}), 2000);
});
