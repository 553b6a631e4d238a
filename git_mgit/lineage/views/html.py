"""The graph as one self-contained HTML page: open it in any browser, offline.

The page embeds the JSON document (`jsonview.to_dict`) and a small script
that lays the graph out in layers (each version below all of its parents),
draws it as SVG, pans on drag, zooms on the wheel, shows a version's details
on click and highlights versions whose label matches the search box. No
external scripts, styles or fonts.
"""

from __future__ import annotations

import json

from git_mgit.lineage.graph import Graph
from git_mgit.lineage.views.jsonview import to_dict

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>git-mgit lineage</title>
<style>
body{margin:0;font:13px system-ui,sans-serif;display:flex;height:100vh;color:#222}
#main{flex:1;position:relative;overflow:hidden;background:#fafbfd}
svg{width:100%;height:100%;cursor:grab}
#side{width:320px;border-left:1px solid #ddd;padding:10px;overflow:auto}
#side input{width:95%;padding:4px}
.node rect{fill:#eef3fb;stroke:#4a6fa5;rx:6}
.node.hit rect{fill:#ffe58a}
.node.sel rect{stroke:#d9480f;stroke-width:2}
.node text{font-size:11px;pointer-events:none}
.prov{stroke:#4a6fa5;fill:none}
.ver{stroke:#888;stroke-dasharray:5 4;fill:none}
#legend{position:absolute;left:8px;bottom:8px;background:#fff;border:1px solid #ddd;padding:6px}
code{word-break:break-all}
</style></head><body>
<div id="main"><svg id="svg"><defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5"
markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#666"/></marker>
</defs><g id="view"></g></svg>
<div id="legend"><svg width="220" height="36"><line x1="4" y1="10" x2="60" y2="10" class="prov"/>
<text x="66" y="14">provenance (derived from)</text><line x1="4" y1="28" x2="60" y2="28" class="ver"/>
<text x="66" y="32">version (replaced by)</text></svg></div></div>
<div id="side"><input id="q" placeholder="search names, paths, ids"><div id="info">
<p>Drag to pan, wheel to zoom, click a version for details.</p></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const G = JSON.parse(document.getElementById("data").textContent);
const W = 190, H = 40, GX = 30, GY = 60, NS = "http://www.w3.org/2000/svg";
const byId = new Map(G.nodes.map(n => [n.id, n]));
const up = new Map(), down = new Map();
for (const n of G.nodes) { up.set(n.id, []); down.set(n.id, []); }
for (const e of G.edges) { up.get(e.child).push(e); down.get(e.parent).push(e); }
// layers: longest path from a root (Kahn's order; versions left in cycles go last)
const indeg = new Map(G.nodes.map(n => [n.id, up.get(n.id).length]));
const layer = new Map(), order = [];
let ready = G.nodes.filter(n => indeg.get(n.id) === 0).map(n => n.id);
while (ready.length) {
  const next = [];
  for (const id of ready) {
    order.push(id);
    for (const e of down.get(id)) {
      layer.set(e.child, Math.max(layer.get(e.child) || 0, (layer.get(id) || 0) + 1));
      indeg.set(e.child, indeg.get(e.child) - 1);
      if (indeg.get(e.child) === 0) next.push(e.child);
    }
  }
  ready = next;
}
const placed = new Set(order);
for (const n of G.nodes) {
  if (!layer.has(n.id)) layer.set(n.id, 0);
  if (!placed.has(n.id)) order.push(n.id);
}
const rows = [];
for (const id of order) (rows[layer.get(id)] ||= []).push(id);
const pos = new Map();
rows.forEach((row, y) => {
  if (y > 0) {  // barycentre of the parents' positions keeps edges short
    const bary = id => { const ps = up.get(id).filter(e => pos.has(e.parent));
      return ps.length ? ps.reduce((s, e) => s + pos.get(e.parent).x, 0) / ps.length : 0; };
    row.sort((a, b) => bary(a) - bary(b));
  }
  row.forEach((id, x) => pos.set(id, {x: x * (W + GX), y: y * (H + GY)}));
});
const view = document.getElementById("view");
const el = (tag, attrs, parent) => { const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]); parent.appendChild(e); return e; };
const size = b => b == null ? "" : b < 1048576 ? (b / 1024).toFixed(1) + " KiB" : (b / 1048576).toFixed(1) + " MiB";
for (const e of G.edges) {
  const a = pos.get(e.parent), b = pos.get(e.child);
  const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y, my = (y1 + y2) / 2;
  el("path", {d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`,
    class: e.kind === "provenance" ? "prov" : "ver", "marker-end": "url(#arr)"}, view);
}
const boxes = new Map();
for (const n of G.nodes) {
  const p = pos.get(n.id), g = el("g", {class: "node", transform: `translate(${p.x},${p.y})`}, view);
  el("rect", {width: W, height: H}, g);
  el("text", {x: 6, y: 16}, g).textContent = n.label.length > 30 ? n.label.slice(0, 29) + "\\u2026" : n.label;
  el("text", {x: 6, y: 32, fill: "#555"}, g).textContent = n.id.slice(0, 10) + "  " + size(n.stored);
  g.addEventListener("click", ev => { ev.stopPropagation(); show(n.id); });
  boxes.set(n.id, g);
}
const info = document.getElementById("info");
function show(id) {
  for (const g of boxes.values()) g.classList.remove("sel");
  boxes.get(id).classList.add("sel");
  const n = byId.get(id), list = (es, end) => es.map(e => {
    const o = byId.get(e[end]); return `<li>${e.kind}${e.function ? " (" + esc(e.function) + ")" : ""}: ` +
      `<a href="#" data-id="${o.id}">${esc(o.label)}</a></li>`; }).join("") || "<li>none</li>";
  info.innerHTML = `<h3>${esc(n.label)}</h3><p>id <code>${n.id}</code></p>` +
    `<p>path ${esc(n.path || "?")} (${n.kind})${n.type ? ", type " + esc(n.type) : ""}</p>` +
    `<p>commit <code>${n.commit || "not committed"}</code>` +
    (n.time ? `, ${new Date(n.time * 1000).toISOString().slice(0, 10)}` : "") + "</p>" +
    (n.stored != null ? `<p>stored ${size(n.stored)}</p>` : "") +
    `<h4>parents</h4><ul>${list(up.get(id), "parent")}</ul><h4>children</h4><ul>${list(down.get(id), "child")}</ul>`;
  for (const a of info.querySelectorAll("a[data-id]"))
    a.addEventListener("click", ev => { ev.preventDefault(); show(a.dataset.id); centre(a.dataset.id); });
}
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]); }
let tx = 20, ty = 20, k = 1;
const apply = () => view.setAttribute("transform", `translate(${tx},${ty}) scale(${k})`);
function centre(id) { const p = pos.get(id), r = svg.getBoundingClientRect();
  tx = r.width / 2 - (p.x + W / 2) * k; ty = r.height / 2 - (p.y + H / 2) * k; apply(); }
const svg = document.getElementById("svg");
let drag = null;
svg.addEventListener("mousedown", ev => { drag = {x: ev.clientX - tx, y: ev.clientY - ty}; });
window.addEventListener("mousemove", ev => { if (drag) { tx = ev.clientX - drag.x; ty = ev.clientY - drag.y; apply(); } });
window.addEventListener("mouseup", () => { drag = null; });
svg.addEventListener("wheel", ev => { ev.preventDefault();
  const f = Math.exp(-ev.deltaY * 0.0015), r = svg.getBoundingClientRect();
  const mx = ev.clientX - r.left, my = ev.clientY - r.top;
  tx = mx - (mx - tx) * f; ty = my - (my - ty) * f; k *= f; apply(); }, {passive: false});
document.getElementById("q").addEventListener("input", ev => {
  const q = ev.target.value.toLowerCase();
  let first = null;
  for (const n of G.nodes) {
    const hit = q && (n.label + " " + (n.path || "") + " " + n.id).toLowerCase().includes(q);
    boxes.get(n.id).classList.toggle("hit", !!hit);
    if (hit && !first) first = n.id;
  }
  if (first) centre(first);
});
apply();
</script></body></html>
"""


def render(g: Graph, sizes: dict[str, int] | None = None) -> str:
    # "<" escaped: no label can close the <script> element it is embedded in.
    data = json.dumps(to_dict(g, sizes), separators=(",", ":")).replace("<", "\\u003c")
    return _PAGE.replace("__DATA__", data)
