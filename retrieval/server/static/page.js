// The search page of `alignir serve`: searches through POST /search and shows why each hit
// matched. Plain DOM (textContent only: no HTML from the index or the query is ever parsed).
"use strict";

const $ = (id) => document.getElementById(id);
const SPACE_MARK = "\u2423";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function fmt(x) {
  return x === null || x === undefined ? "–" : Number(x).toFixed(3);
}

// A term of an explanation as the lower-case text it matches in a document.
function bare(term) {
  return (term.text || term.string || "").split(SPACE_MARK).join("").trim().toLowerCase();
}

// {bare text: weight in [0, 1]} of one leg's explanation (weight: contribution / the largest).
function weightsOf(terms) {
  const out = new Map();
  const top = Math.max(1e-9, ...terms.map((t) => Math.abs(t.contribution)));
  for (const t of terms) {
    const key = bare(t);
    if (key.length === 0) continue;
    out.set(key, Math.max(out.get(key) || 0, Math.abs(t.contribution) / top));
  }
  return out;
}

// The weight of a document word under a leg's terms: the word itself, or a term that starts it
// (a sub-word token, a stem) of at least three characters.
function wordWeight(word, weights) {
  let best = weights.get(word) || 0;
  for (const [key, w] of weights) {
    if (key.length >= 3 && w > best && word.startsWith(key)) best = w;
  }
  return best;
}

function highlighted(text, explanations) {
  const aligned = weightsOf(explanations.sparse || []);
  const bm25 = weightsOf(explanations.bm25 || []);
  const out = el("p", { class: "text" });
  for (const part of text.split(/(\w+)/u)) {
    if (!/^\w+$/u.test(part)) { out.append(part); continue; }
    const word = part.toLowerCase();
    const a = wordWeight(word, aligned), b = wordWeight(word, bm25);
    if (a === 0 && b === 0) { out.append(part); continue; }
    let node = document.createTextNode(part);
    if (b > 0) node = el("span", { class: "hl-bm25", "data-weight": b.toFixed(3), style: `--w:${b.toFixed(3)}` }, node);
    if (a > 0) node = el("span", { class: "hl-aligned", "data-weight": a.toFixed(3), style: `--w:${a.toFixed(3)}` }, node);
    out.append(node);
  }
  return out;
}

function termList(legName, terms) {
  const list = el("ul", { class: "terms" });
  for (const t of terms.slice(0, 12)) {
    list.append(el("li", {}, el("code", {}, t.text || t.string), ` ${fmt(t.contribution)}`));
  }
  return el("div", { class: `why why-${legName}` }, el("strong", {}, legName === "sparse" ? "aligned tokens" : legName), list);
}

function renderHit(hit, legs) {
  const scores = el("span", { class: "scores" }, `score ${fmt(hit.score)}`);
  for (const leg of legs) scores.append(el("span", { class: `leg leg-${leg}` }, ` · ${leg} ${fmt(hit[`${leg}_score`])}`));
  const item = el("li", { class: "hit", "data-id": hit.id },
    el("div", { class: "head" }, el("span", { class: "id" }, hit.id), " ", scores));
  const explanations = hit.explanations || {};
  if (hit.title) {
    const title = highlighted(hit.title, explanations);
    item.append(el("h3", {}, ...title.childNodes));
  }
  if (hit.text !== undefined) item.append(highlighted(hit.text, explanations));
  const why = el("div", { class: "whys" });
  for (const [leg, terms] of Object.entries(explanations)) if (terms.length) why.append(termList(leg, terms));
  item.append(why);
  return item;
}

function renderPlan(body) {
  $("plan").hidden = false;
  $("plan-body").replaceChildren(el("pre", {}, body.plan_text));
}

function renderExpansion(tokens) {
  $("expansion").hidden = tokens.length === 0;
  const top = Math.max(1e-9, ...tokens.map((t) => t.weight));
  const box = el("div", { class: "chips" });
  for (const t of tokens) {
    const w = (t.weight / top).toFixed(3);
    box.append(el("span", { class: t.in_query ? "chip chip-query" : "chip chip-expansion", "data-weight": w,
      style: `--w:${w}`, title: `weight ${fmt(t.weight)}${t.in_query ? " (in the query)" : " (expansion)"}` }, t.text));
  }
  $("expansion-body").replaceChildren(box);
}

async function search(event) {
  if (event) event.preventDefault();
  const q = $("q").value.trim();
  if (!q) return;
  const request = { q, k: Number($("k").value) || 10, mode: $("mode").value, explain: true, text: true };
  if ($("fusion").value) request.fusion = $("fusion").value;
  $("status").textContent = "searching…";
  try {
    const response = await fetch("/search", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request) });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    $("version").textContent = body.index_version;
    renderPlan(body);
    renderExpansion(body.expansion || []);
    $("hits").replaceChildren(...body.hits.map((h) => renderHit(h, body.plan.legs)));
    $("status").textContent = `${body.hits.length} hits in ${body.took_ms.toFixed(1)} ms`;
  } catch (e) {
    $("hits").replaceChildren();
    $("status").textContent = `error: ${e.message}`;
  }
}

$("search").addEventListener("submit", search);
const initial = new URLSearchParams(location.search).get("q");
if (initial) { $("q").value = initial; search(); }
