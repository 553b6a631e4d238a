"""The lineage graph's renderers: text tree, DOT, Mermaid, JSON, HTML."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from git_mgit.lineage import history, records
from git_mgit.lineage.graph import Graph, build
from git_mgit.lineage.views import FORMATS, html, text

A, B, C, D, E = (f"{c * 40}" for c in "abcde")


def diamond() -> Graph:
    """a -> b, a -> c, b -> d, c -> d (provenance); a -> e (version, from history)."""
    hist = history.History()
    for oid, path, t in [(A, "a.st", 1), (B, "b.st", 2), (C, "c.st", 3), (D, "d.st", 4)]:
        hist.versions[oid] = history.Sighting(path, "file", "1" * 40, t)
    hist.versions[E] = history.Sighting("a.st", "file", "2" * 40, 5)
    hist.edges.append((A, E, "a.st", "2" * 40))

    def prov(parent: str, fn: str) -> str:
        return records.make("provenance", parent=parent, function=fn).line()

    notes = {
        A: records.make("node", name='base "quoted" </script>').line(),
        B: prov(A, "train:b"),
        C: prov(A, "train:c"),
        D: prov(B, "merge:d") + "\n" + prov(C, "merge:d"),
    }
    return build(hist, notes)


def test_text_tree_prints_a_shared_child_once_then_refers_to_it() -> None:
    out = text.render(diamond(), {A: 3 << 20})
    lines = out.splitlines()
    assert lines[0].startswith('base "quoted" </script>  aaaaaaaaaa') and "3.0 MiB" in lines[0]
    full = [ln for ln in lines if "d.st@ddddddd  dddddddddd" in ln]
    refs = [ln for ln in lines if "d.st@ddddddd (shown above)" in ln]
    assert len(full) == 1 and len(refs) == 1
    assert any("derived (train:b)" in ln for ln in lines)
    assert any("version: a.st@eeeeeee" in ln for ln in lines)
    assert len(lines) == 6  # a, b, d, c, d again (reference), e


def test_text_tree_handles_long_chains_and_cycles() -> None:
    hist = history.History()
    ids = [f"{i:040x}" for i in range(10_000)]
    for i, oid in enumerate(ids):
        hist.versions[oid] = history.Sighting("m.st", "file", "1" * 40, i)
    hist.edges += [(ids[i], ids[i + 1], "m.st", "1" * 40) for i in range(len(ids) - 1)]
    out = text.render(build(hist, {}))
    assert len(out.splitlines()) == 10_000
    cyc = history.History()
    cyc.versions[A] = history.Sighting("x", "file", "1" * 40, 1)
    cyc.versions[B] = history.Sighting("x", "file", "1" * 40, 2)
    cyc.edges += [(A, B, "x", "1" * 40), (B, A, "x", "1" * 40)]
    lines = text.render(build(cyc, {})).splitlines()  # no root: starts at the oldest
    assert len(lines) == 3 and lines[2].endswith("version: … x@aaaaaaa (shown above)")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_shows_every_version_and_edge(fmt: str) -> None:
    g = diamond()
    out = FORMATS[fmt](g, None)
    for oid in (A, B, C, D, E):
        assert oid[:10] in out
    assert "train:b" in out and "merge:d" in out


def test_json_is_the_graph() -> None:
    doc = json.loads(FORMATS["json"](diamond(), {B: 42}))
    assert [n["id"] for n in doc["nodes"]] == [A, B, C, D, E]
    assert {(e["parent"], e["child"], e["kind"]) for e in doc["edges"]} == {
        (A, B, "provenance"),
        (A, C, "provenance"),
        (B, D, "provenance"),
        (C, D, "provenance"),
        (A, E, "version"),
    }
    assert next(n for n in doc["nodes"] if n["id"] == B)["stored"] == 42


def test_dot_is_valid_graphviz() -> None:
    out = FORMATS["dot"](diamond(), None)
    assert out.count("{") == out.count("}") == 1
    declared = set(re.findall(r'^  "([0-9a-f]{40})" \[label', out, re.M))
    used = re.findall(r'^  "([0-9a-f]{40})" -> "([0-9a-f]{40})"', out, re.M)
    assert declared == {A, B, C, D, E} and len(used) == 5
    assert all(p in declared and c in declared for p, c in used)
    assert '\\"quoted\\"' in out and "style=dashed" in out
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg"], input=out.encode(), check=True, capture_output=True)


def test_mermaid_ids_are_safe_and_labels_escaped() -> None:
    out = FORMATS["mermaid"](diamond(), None)
    assert out.startswith("flowchart TD\n")
    for line in out.splitlines()[1:]:
        assert re.fullmatch(
            r'    v[0-9a-f]{40}(\[".*"\]| (-->(\|"[^"]*"\|)?|-\.->) v[0-9a-f]{40})', line
        )
    assert "#quot;quoted#quot;" in out


def test_html_is_self_contained_and_cannot_be_broken_by_a_label() -> None:
    page = FORMATS["html"](diamond(), None)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    assert data is not None
    doc = json.loads(data.group(1))
    assert doc["nodes"][0]["label"] == 'base "quoted" </script>'
    assert page.count("</script>") == 2  # the data block's and the code's, nothing else


STUB_DOM = """
const made = [];
function element(tag) {
  const e = {tag, attrs: {}, children: [], listeners: {}, textContent: "", dataset: {},
    classList: {set: new Set(), add(c) { this.set.add(c); }, remove(c) { this.set.delete(c); },
      toggle(c, on) { on ? this.set.add(c) : this.set.delete(c); }},
    setAttribute(k, v) { this.attrs[k] = String(v); },
    appendChild(c) { this.children.push(c); return c; },
    addEventListener(type, fn) { this.listeners[type] = fn; },
    getBoundingClientRect() { return {left: 0, top: 0, width: 800, height: 600}; },
    querySelectorAll() { return []; }, set innerHTML(v) { this.html = v; }};
  made.push(e);
  return e;
}
const stubs = {};
const document = {
  getElementById(id) {
    if (id === "data") return {textContent: DATA};
    return stubs[id] ||= element(id);
  },
  createElementNS(_, tag) { return element(tag); },
};
const window = {listeners: {}, addEventListener(t, f) { this.listeners[t] = f; }};
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_html_script_lays_out_every_version_and_responds(tmp_path: Path) -> None:
    page = html.render(diamond(), {A: 1 << 20})
    code = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    checks = """
const groups = made.filter(e => e.tag === "g" && e.attrs.class === "node");
const ys = groups.map(g => Number(/,(\\d+)\\)/.exec(g.attrs.transform)[1]));
console.log(JSON.stringify({nodes: groups.length,
  paths: made.filter(e => e.tag === "path" && e.attrs.class).length, ys}));
groups[3].listeners.click({stopPropagation() {}});
document.getElementById("q").listeners.input({target: {value: "quoted"}});
window.listeners.mousemove({clientX: 5, clientY: 5});
console.log(groups[0].classList.set.has("hit") ? "search-ok" : "search-missed");
console.log(/parents/.test(document.getElementById("info").html) ? "details-ok" : "no-details");
"""
    script = tmp_path / "page.js"
    script.write_text(f"const DATA = {json.dumps(data.group(1))};\n{STUB_DOM}\n{code}\n{checks}")
    out = subprocess.run(["node", str(script)], capture_output=True, text=True, check=True)
    first, *rest = out.stdout.splitlines()
    layout = json.loads(first)
    assert layout["nodes"] == 5 and layout["paths"] == 5
    a, b, c, d, e = layout["ys"]
    assert a < b and a < c and max(b, c) < d and a < e  # every version below its parents
    assert rest == ["search-ok", "details-ok"]
