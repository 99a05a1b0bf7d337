// mmtok proxy dashboard: polls /mmtok/api/summary and fills the page. Every value from the ledger is set as text
// (never as HTML: model names, tags and messages come from callers). Exact amounts are kept in data-value.
"use strict";

const POLL_MS = 2000;
let updates = 0;

function usd(text) {
  const amount = Number(text);
  if (!Number.isFinite(amount)) return String(text);
  if (amount === 0) return "$0";
  if (Math.abs(amount) >= 1) return "$" + amount.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
  return "$" + amount.toPrecision(3).replace(/0+$/, "").replace(/\.$/, "");
}

function count(n) {
  return Number(n).toLocaleString("en-US");
}

function setText(id, text, value) {
  const node = document.getElementById(id);
  node.textContent = text;
  if (value !== undefined) node.dataset.value = String(value);
}

function cell(row, text, className, value) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  if (className === "code") td.title = text;  // shortened with an ellipsis where long: the whole on hover
  if (value !== undefined) td.dataset.value = String(value);
  row.appendChild(td);
  return td;
}

function fill(tbody, rows, addRow) {
  tbody.replaceChildren();
  for (const item of rows) {
    const tr = document.createElement("tr");
    addRow(tr, item);
    tbody.appendChild(tr);
  }
}

function groupRow(tr, g) {
  tr.dataset.group = g.group;
  cell(tr, g.group, "code");
  cell(tr, count(g.calls), "n", g.calls);
  cell(tr, count(g.refused), "n", g.refused);
  cell(tr, usd(g.spend), "n spend", g.spend);
  cell(tr, usd(g.predicted), "n", g.predicted);
  cell(tr, usd(g.billed), "n", g.billed);
}

function budgetRow(tr, b) {
  tr.dataset.scope = b.scope;
  cell(tr, b.scope === "all" ? "all calls" : b.scope, "code");
  cell(tr, usd(b.limit), "n", b.limit);
  cell(tr, usd(b.spent), "n spent", b.spent);
  cell(tr, usd(b.held), "n", b.held);
  const limit = Number(b.limit), spent = Number(b.spent), held = Number(b.held);
  const used = limit > 0 ? spent / limit : 0;
  const td = cell(tr, "", "bar-cell");
  const bar = document.createElement("div");
  bar.className = "bar" + (used >= 1 ? " over" : used >= 0.8 ? " near" : "");
  bar.title = (100 * used).toFixed(1) + "% spent";
  const spentPart = document.createElement("span");
  spentPart.className = "spent";
  spentPart.style.width = Math.min(100, 100 * used) + "%";
  const heldPart = document.createElement("span");
  heldPart.className = "held";
  heldPart.style.left = Math.min(100, 100 * used) + "%";
  heldPart.style.width = Math.max(0, Math.min(100 - 100 * used, limit > 0 ? 100 * held / limit : 0)) + "%";
  bar.append(spentPart, heldPart);
  td.appendChild(bar);
}

function accuracyRow(tr, a) {
  cell(tr, a.model, "code");
  cell(tr, count(a.calls), "n", a.calls);
  cell(tr, count(a.predicted_input), "n", a.predicted_input);
  cell(tr, count(a.billed_input), "n", a.billed_input);
  const error = a.billed_input ? (a.billed_input - a.predicted_input) / a.billed_input : 0;
  cell(tr, (error > 0 ? "+" : "") + (100 * error).toFixed(1) + "%", "n");
  cell(tr, usd(a.predicted), "n", a.predicted);
  cell(tr, usd(a.billed), "n", a.billed);
}

function recentRow(tr, r) {
  cell(tr, r.time.slice(11, 19), "n");
  cell(tr, r.model || "?", "code");
  cell(tr, r.outcome, r.outcome === "refused" ? "outcome-refused" : "outcome-error");
  cell(tr, String(r.status || ""), "n");
  cell(tr, r.message, "why");
}

function tagTables(container, byTag) {
  container.replaceChildren();
  for (const [name, rows] of Object.entries(byTag)) {
    const heading = document.createElement("h3");
    heading.textContent = "tag " + name;
    const table = document.createElement("table");
    table.className = "groups";
    table.dataset.tag = name;
    const head = table.createTHead().insertRow();
    for (const [title, numeric] of [[name, false], ["calls", true], ["refused", true], ["spend", true],
                                    ["predicted", true], ["billed", true]]) {
      const th = document.createElement("th");
      th.textContent = title;
      if (numeric) th.className = "n";
      head.appendChild(th);
    }
    fill(table.createTBody(), rows, groupRow);
    container.append(heading, table);
  }
  document.getElementById("no-tags").hidden = Object.keys(byTag).length > 0;
}

function render(s) {
  const t = s.totals;
  setText("day", s.day);
  setText("spend", usd(t.spend), t.spend);
  setText("calls", count(t.calls), t.calls);
  setText("ok", count(t.ok), t.ok);
  setText("refused", count(t.refused), t.refused);
  setText("errors", count(t.errors), t.errors);
  // Input tokens: what calibration is about (predicted costs are bounds, their output at the body's limit).
  const ratio = Number(t.billed_input) > 0 ? Number(t.predicted_input) / Number(t.billed_input) : null;
  setText("ratio", ratio === null ? "–" : ratio.toFixed(2) + "×", ratio === null ? "" : ratio);
  setText("compared-predicted", usd(t.compared_predicted), t.compared_predicted);
  setText("compared-billed", usd(t.compared_billed), t.compared_billed);
  setText("compared-calls", count(t.compared_calls), t.compared_calls);
  setText("predicted-input", count(t.predicted_input), t.predicted_input);
  setText("billed-input", count(t.billed_input), t.billed_input);
  setText("saved", usd(t.saved), t.saved);
  setText("shrunk", count(t.shrunk), t.shrunk);
  setText("ledger", s.ledger + (s.skipped_rows ? " (" + s.skipped_rows + " malformed rows skipped)" : ""));
  fill(document.querySelector("#budgets tbody"), s.budgets, budgetRow);
  document.getElementById("no-budgets").hidden = s.budgets.length > 0;
  fill(document.querySelector("#by-model tbody"), s.by_model, groupRow);
  fill(document.querySelector("#by-key tbody"), s.by_key, groupRow);
  tagTables(document.getElementById("by-tag"), s.by_tag);
  fill(document.querySelector("#accuracy tbody"), s.accuracy, accuracyRow);
  fill(document.querySelector("#recent tbody"), s.recent, recentRow);
  document.getElementById("no-recent").hidden = s.recent.length > 0;
}

async function poll() {
  const live = document.getElementById("live");
  try {
    const answer = await fetch("/mmtok/api/summary", {cache: "no-store"});
    if (!answer.ok) throw new Error("the summary answered " + answer.status);
    const summary = await answer.json();
    render(summary);
    updates += 1;
    document.body.dataset.updates = String(updates);
    document.body.dataset.generated = summary.generated;
    live.className = "dot on";
    setText("updated", "updated " + new Date().toLocaleTimeString("en-GB"));
    document.getElementById("problem").hidden = true;
  } catch (error) {
    live.className = "dot off";
    const problem = document.getElementById("problem");
    problem.textContent = "Cannot read the summary (" + error.message + "); retrying.";
    problem.hidden = false;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
