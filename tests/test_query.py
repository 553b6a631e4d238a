"""`git mgit query` on a repository built like the demo: its model zoo, made by the zoo's own scripts.

ModelHub's four example queries run exactly as docs/query.md writes them
(read from the docs), every model they make is checked out byte for byte
in a clone of a bare remote and names its query on its provenance edge,
and errors point at the offending token.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import git_mgit
from git_mgit.dql import QueryError, Result
from git_mgit.dql.parse import canonical, parse
from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from git_mgit.lineage.graph import PROVENANCE
from git_mgit.runtime.execution.localcluster import cluster
from tests.gitsandbox import Remote, clone, rev_parse, run_git
from tests.mgitrepo import mgit, status_porcelain
from tests.runtime_repo import demo_zoo, isolated_home, working_copy

DOCS = Path(__file__).parents[1] / "docs" / "query.md"
FINE_TUNES = ["ft-a", "ft-b", "ft-c"]


def examples() -> list[str]:
    """Every query docs/query.md shows in a ```dql block."""
    return re.findall(r"```dql\n(.*?)```", DOCS.read_text(), re.S)


def modelhub(n: int) -> str:
    """The docs' equivalent of ModelHub's Query n."""
    return next(e for e in examples() if e.startswith(f"-- ModelHub Query {n}\n"))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with isolated_home(tmp_path_factory.mktemp("template-home")):
        repo = demo_zoo(tmp_path_factory.mktemp("template") / "work")
        mgit("test", "--jobs", "2", cwd=repo)  # records accuracy and fp16 of HEAD's models
        return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    return working_copy(template, tmp_path)


def query(repo: Path, text: str, **options: object) -> Result:
    return git_mgit.query(text, repo=repo, **options)  # type: ignore[arg-type]


def head(repo: Path, path: str) -> str:
    return rev_parse(repo, f"HEAD:{path}")


def provenance(repo: Path, version: str) -> dict[str, dict[str, str]]:
    """parent version -> the provenance edge's attributes."""
    g = Lineage(find_repo(repo)).graph
    return {e.parent: e.info for e in g.in_edges(version, (PROVENANCE,))}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- ModelHub's four queries -----------------------------------------------------------------


def test_modelhub_query_1_selects_the_float32_fine_tunes(repo: Path) -> None:
    result = query(repo, modelhub(1))
    assert sorted(r["name"] for r in result) == FINE_TUNES
    assert {r["id"] for r in result} == {head(repo, f"zoo/{n}.safetensors") for n in FINE_TUNES}


def test_modelhub_query_2_slices_the_body_with_its_query_on_the_edge(repo: Path) -> None:
    (row,) = query(repo, modelhub(2)).rows
    assert (row["path"], row["name"], row["tensors"]) == (
        "zoo/base-body.safetensors",
        "base-body",
        2,
    )
    sliced = load_file(repo / row["path"])
    base = load_file(repo / "zoo/base.safetensors")
    assert sorted(sliced) == ["body.bias", "body.weight"]
    assert all(torch.equal(sliced[k], base[k]) for k in sliced)
    edges = provenance(repo, row["version"])
    assert list(edges) == [head(repo, "zoo/base.safetensors")]
    assert edges[head(repo, "zoo/base.safetensors")]["function"] == "query: " + canonical(
        modelhub(2)
    )
    with safe_open(repo / row["path"], "pt") as f:
        assert f.metadata()["mgit_query"] == canonical(modelhub(2))
    assert row["commit"] == rev_parse(repo, "HEAD") and status_porcelain(repo) == ""


def test_modelhub_query_3_constructs_serving_models(repo: Path) -> None:
    rows = query(repo, modelhub(3)).rows
    assert sorted(r["path"] for r in rows) == [f"zoo/{n}-bf16.safetensors" for n in FINE_TUNES]
    ft_b = load_file(repo / "zoo/ft-b.safetensors")
    for row in rows:
        name = row["path"].removeprefix("zoo/").removesuffix("-bf16.safetensors")
        source, made = load_file(repo / f"zoo/{name}.safetensors"), load_file(repo / row["path"])
        assert sorted(made) == [
            "body.bias",
            "body.weight",
            "heads.b.bias",
            "heads.b.weight",
            "heads.own.bias",
            "heads.own.weight",
        ]
        for k in ("body.bias", "body.weight"):
            assert made[k].dtype == torch.bfloat16
            assert torch.equal(made[k], source[k].to(torch.bfloat16))
        assert torch.equal(made["heads.own.weight"], source["head.weight"])
        assert torch.equal(made["heads.own.bias"], torch.zeros(4))
        assert torch.equal(made["heads.b.weight"], ft_b["head.weight"])
        parents = set(provenance(repo, row["version"]))
        assert parents == {
            head(repo, f"zoo/{name}.safetensors"),
            head(repo, "zoo/ft-b.safetensors"),
        }


def test_evaluate_on_a_two_node_cluster_keeps_and_makes_what_the_local_backend_does(
    template: Path, tmp_path: Path
) -> None:
    here, there = working_copy(template, tmp_path / "a"), working_copy(template, tmp_path / "b")
    local = query(here, modelhub(4), jobs=2)
    with cluster(tmp_path / "cluster") as c:
        remote = query(there, modelhub(4), cluster=c.address)
        assert any(c.cache(n).is_dir() for n in c.nodes)  # the nodes made and tested them
    assert remote.rows == local.rows  # the same candidates, metrics, ranks and kept versions
    for r in (r for r in remote if r["kept"]):
        assert load_file(there / r["path"]).keys() == load_file(here / r["path"]).keys()
        assert sha256(there / r["path"]) == sha256(here / r["path"])


def test_modelhub_query_4_and_every_derived_model_byte_identical_on_a_clone(
    repo: Path, bare_remote: Remote, tmp_path: Path
) -> None:
    made = {r["version"]: (r["path"], modelhub(2)) for r in query(repo, modelhub(2))}
    made |= {r["version"]: (r["path"], modelhub(3)) for r in query(repo, modelhub(3))}
    result = query(repo, modelhub(4), jobs=2)
    assert [r["lr"] for r in result] and len(result.rows) == 3
    kept = [r for r in result if r["kept"]]
    assert [r["rank"] for r in kept] == [1, 2] and all(r["error"] is None for r in result)
    metric = "m.accuracy.accuracy"
    assert kept[0][metric] >= kept[1][metric] >= max(r[metric] for r in result if not r["kept"])
    made |= {r["version"]: (r["path"], modelhub(4)) for r in kept}
    ft_a_parents = set(provenance(repo, head(repo, "zoo/ft-a.safetensors")))
    for r in kept:  # made from ft-a's parent by ft-a's creation function, with lr varied
        assert set(provenance(repo, r["version"])) == ft_a_parents
        assert r["path"] == f"zoo/ft-a-lr{r['lr']:g}.safetensors"
    found = query(repo, 'select m.id, m.accuracy.accuracy where m derived by "query: evaluate%"')
    assert {r["m.id"]: r["m.accuracy.accuracy"] for r in found} == {
        r["version"]: r[metric] for r in kept
    }

    run_git("remote", "add", "origin", bare_remote.url, cwd=repo)
    run_git("push", "-q", "origin", "main", cwd=repo)
    other = clone(bare_remote.url, tmp_path / "clone")
    mgit("fetch", cwd=other)  # the lineage notes
    graph = Lineage(find_repo(other)).graph
    for version, (path, text) in made.items():
        assert head(other, path) == version
        assert sha256(other / path) == sha256(repo / path), path
        functions = {e.info["function"] for e in graph.in_edges(version, (PROVENANCE,))}
        assert functions == {"query: " + canonical(text)}, path
    assert status_porcelain(other) == ""


def test_a_cascade_stops_at_a_query_made_model_with_what_to_do(repo: Path) -> None:
    """A cascade re-runs creation functions; a model a query sliced has none to re-run."""
    (row,) = query(repo, modelhub(2)).rows  # base-body, sliced from base
    new = {k: v * 1.1 for k, v in load_file(repo / "zoo/base.safetensors").items()}
    commit_model(
        new, repo / "zoo/base.safetensors", "update base", lineage=Lineage(find_repo(repo))
    )
    proc = mgit("cascade", "base", cwd=repo, check=False)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "base-body was made by a query, which a cascade does not re-run" in line
    assert "or add creation = 'module:function' to [models.base-body] in mgit.toml" in line
    assert row["version"] == head(repo, "zoo/base-body.safetensors")


def test_every_example_in_the_docs_runs(repo: Path) -> None:
    """Each docs example runs (derivations as dry runs: they check everything but commit)."""
    assert len(examples()) >= 4
    for text in examples():
        result = query(repo, text, dry_run=True)
        assert result.rows, text


# -- select ------------------------------------------------------------------------------------


def names(repo: Path, where: str) -> list[str]:
    return [r["name"] for r in query(repo, f"select m where {where}")]


def test_select_by_lineage_dates_authors_branches_tensors_and_metrics(repo: Path) -> None:
    first_base = rev_parse(repo, "HEAD~2:zoo/base.safetensors")
    derived = ["ft-a", "ft-b", "ft-c", "grand", "pruned"]
    assert sorted(names(repo, f'm descendant of "{first_base[:8]}"')) == derived
    assert sorted(names(repo, 'm descendant of (select b where b.name = "base")')) == derived
    assert sorted(names(repo, 'm ancestor of "grand"')) == ["base", "ft-a"]
    assert names(repo, 'm derived by "train:finetune_%"') == FINE_TUNES
    chain = [
        r["id"]
        for r in query(repo, 'select m where m version of "base" order by m.time desc, m.id')
    ]
    log = run_git("log", "--format=%H", "--", "zoo/base.safetensors", cwd=repo).stdout.split()
    assert sorted(chain) == sorted(rev_parse(repo, f"{c}:zoo/base.safetensors") for c in log)
    everything = names(repo, 'm.time > "2020-01-01"')
    assert len(everything) == 8  # 3 versions of the base, 5 derived models
    assert names(repo, 'm.time < "2000-01-01T00:00+00:00"') == []
    assert (
        len(names(repo, 'm.time > "2 days ago" and m.author = "Test" and m.branch = "main"')) == 8
    )
    assert names(repo, 'm.path matches "grand" or m.name in ["pruned"]') == ["grand", "pruned"]
    assert len(names(repo, 'all m[".*"].dtype = "F32" and m["body\\..*"].count = 2')) == 8
    assert len(names(repo, 'm["body.weight"].shape = [64, *] and m.type = "mlp"')) == 8
    assert names(repo, 'not m["head\\..*"]') == []

    top = query(
        repo,
        'select m.name, m.accuracy.accuracy as acc where m at "HEAD" and m.accuracy.accuracy >= 0 '
        "order by acc desc, m.name limit 3",
    )
    assert [label for label, _ in top.columns] == ["m.name", "acc"] and len(top.rows) == 3
    assert [r["acc"] for r in top] == sorted((r["acc"] for r in top), reverse=True)
    old = query(repo, 'select m.accuracy.accuracy where m.id = "' + first_base[:10] + '"')
    assert [r["m.accuracy.accuracy"] for r in old] == [None]  # tested at HEAD only
    rows = json.loads(query(repo, 'select m where m.name = "grand"').to_json())
    assert rows[0]["id"] == head(repo, "zoo/grand.safetensors") and "T" in rows[0]["time"]


def test_a_selector_matching_nothing_is_a_note_in_select_and_an_error_in_slice(repo: Path) -> None:
    result = query(repo, 'select m where m["conv[135]\\..*"]')
    assert result.rows == []
    assert result.notes == [
        'm["conv[135]\\..*"] matches no tensor in the 8 version(s) read (their tensors: '
        "body.bias, body.weight, head.bias, head.weight)"
    ]
    text = 'slice m2 from m1 where m1.name = "base" and m1 at "HEAD"\nmutate m2 = m1["conv1"] into "x.safetensors"'
    with pytest.raises(QueryError) as err:
        query(repo, text)
    assert str(err.value).splitlines() == [
        "query error at line 2, column 13: ['conv1'] matches no tensor of base@"
        + head(repo, "zoo/base.safetensors")[:7]
        + " (its tensors: body.bias, body.weight, head.bias, head.weight)",
        '  mutate m2 = m1["conv1"] into "x.safetensors"',
        "              ^^^^^^^^^^^",
    ]
    assert status_porcelain(repo) == ""


@pytest.mark.parametrize(
    ("text", "token", "message"),
    [
        ('select m where m descendant of "nope"', '"nope"', "unknown model 'nope'"),
        (
            'evaluate m from "nope" vary lr in [1] keep top(1, m.accuracy.accuracy)',
            '"nope"',
            "unknown model 'nope'",
        ),
        (
            'construct b from a mutate copy "nope"["x"] into "x.safetensors"',
            '"nope"',
            "unknown model 'nope'",
        ),
        ('select m where m.colour = "red"', "m.colour", "m.colour: a model has id, name"),
        ("select m where m.time > 3", "3", "m.time is a time: compare it with a date in quotes"),
        ('select m where m.time > "last tuesday"', '"last tuesday"', "is not a date"),
        ("select m where m.name > 3", "3", "m.name is text: compare it with a quoted string"),
        ("select m where m.speed.kmh > 3", "m.speed.kmh", "no test named 'speed'"),
        ('select m where m at "nobranch"', 'm at "nobranch"', "'nobranch' is not a revision"),
        ("select m order by m.branch", "m.branch", "is a set of values"),
        (
            'slice b from a where a.name = "base" mutate b = a["body.*"] into "zoo/body.safetensors"',
            '"zoo/body.safetensors"',
            "3 models would get the path 'zoo/body.safetensors'",
        ),
        (
            'slice b from a where a.name = "ft-a" mutate b = a["body.*"] into "zoo/x.bin"',
            '"zoo/x.bin"',
            "zoo/x.bin is not tracked by git-mgit",
        ),
        (
            'slice b from a where a.name = "ft-a" mutate b = a["body.*"] into "zoo/{stem}-b.safetensors" named "grand"',
            '"grand"',
            "the name 'grand' is taken",
        ),
        (
            'construct b from a where a.name = "ft-a" mutate rename a["(body|head)\\.bias"] to "bias" into "y.safetensors"',
            '"bias"',
            "2 tensors would be named 'bias'",
        ),
        (
            'construct b from a where a.name = "ft-a" mutate rename a["body.bias"] to "head.bias" into "y.safetensors"',
            '"head.bias"',
            "renaming would overwrite the tensor 'head.bias'",
        ),
        (
            'evaluate m from "base" vary lr in [1] keep top(1, m.accuracy.accuracy)',
            '"base"',
            "has no creation function to vary",
        ),
        (
            'evaluate m from "ft-a" vary lr in [1] keep top(1, m.speed.kmh)',
            "m.speed.kmh",
            "no test 'speed' in mgit.toml",
        ),
    ],
)
def test_errors_point_at_the_offending_token(
    repo: Path, text: str, token: str, message: str
) -> None:
    with pytest.raises(QueryError) as err:
        query(repo, text, dry_run=True)
    first, line, caret = str(err.value).splitlines()
    assert message in first, first
    column = text.index(token) + 1
    assert first.startswith(f"query error at line 1, column {column}: ")
    assert line == "  " + text and caret == "  " + " " * (column - 1) + "^" * len(token)


def test_no_source_is_an_error_and_a_dry_run_commits_nothing(repo: Path) -> None:
    with pytest.raises(QueryError, match="no model version matches the where clause"):
        query(repo, 'slice b from a where a.name = "nope" mutate b = a[".*"] into "x.safetensors"')
    before = rev_parse(repo, "HEAD")
    planned = query(repo, modelhub(3), dry_run=True)
    assert len(planned.rows) == 3 and planned.notes == ["dry run: nothing was committed"]
    assert rev_parse(repo, "HEAD") == before and status_porcelain(repo) == ""


# -- the grammar (no repository) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "width", "message"),
    [
        (
            'select m where m.name foo "x"',
            1,
            23,
            3,
            "expected a comparison (=, !=, <, <=, >, >=, like, matches, in) or '.', got 'foo'",
        ),
        (
            "select m where m.name = ",
            1,
            23,
            1,
            "the query ends too early; expected '[', a number or a quoted string",
        ),
        (
            'select m where m.name = "a" # x',
            1,
            29,
            1,
            "unexpected character '#'; expected the end of the query, 'and', 'limit', 'or' or 'order'",
        ),
        (
            "select m order by m.time descending",
            1,
            26,
            10,
            "expected the end of the query, 'asc', ',', 'desc', '.' or 'limit', got 'descending'",
        ),
        ("selec m", 1, 1, 5, "expected 'construct', 'evaluate', 'select' or 'slice', got 'selec'"),
        (
            'select m where\n  m.name = "a" and\n  x.path = "b"',
            3,
            3,
            6,
            "unknown variable 'x'; this clause's model is m",
        ),
        (
            'select m where m["("]',
            1,
            18,
            3,
            "bad regular expression: missing ), unterminated subpattern",
        ),
        (
            'construct b from a mutate rename a["x"] to "$1" into "y"',
            1,
            44,
            4,
            "$1 names a group the pattern 'x' does not have",
        ),
        ('construct b from a mutate cast a["x"] to F17 into "y"', 1, 42, 3, "unknown dtype 'F17'"),
        (
            'construct b from a mutate reinit a["x"] with normal(1) into "y"',
            1,
            46,
            6,
            "normal() takes 2 number(s), got 1",
        ),
        (
            'slice b from a mutate b = a["x"] into "{nme}.safetensors"',
            1,
            39,
            19,
            "unknown placeholder {nme}",
        ),
        (
            'slice b from a mutate b.input = a["x"] into "y"',
            1,
            23,
            16,
            "a range slice needs both b.input and b.output",
        ),
        (
            'evaluate m from "x" vary lr in [1] keep top(1, m.acc)',
            1,
            48,
            5,
            "rank by a test metric: m.TEST.METRIC",
        ),
        (
            'evaluate m from "x" vary lr in [1] keep best(1, m.a.b)',
            1,
            41,
            4,
            "keep top(N, METRIC) or bottom(N, METRIC)",
        ),
    ],
)
def test_grammar_errors_put_a_caret_under_the_token(
    text: str, line: int, column: int, width: int, message: str
) -> None:
    with pytest.raises(QueryError) as err:
        parse(text)
    first, shown, caret = str(err.value).splitlines()
    assert first.startswith(f"query error at line {line}, column {column}: {message}"), first
    assert shown == "  " + text.splitlines()[line - 1]
    assert caret == "  " + " " * (column - 1) + "^" * width


def test_keywords_are_whole_words_and_the_canonical_text_is_one_line() -> None:
    q = parse(
        "SELECT m.name AS n -- a comment\nWHERE m.name LIKE 'ft-%'\n  ORDER BY n DESC LIMIT 2"
    )
    assert q.projections[0].label == "n" and q.scope.limit == 2
    assert q.scope.order[0].descending and q.scope.order[0].expr.text == "m.name"
    assert q.text == "SELECT m.name AS n WHERE m.name LIKE 'ft-%' ORDER BY n DESC LIMIT 2"
    assert parse('select m where m.index = 1 and m.allowed = "x"').scope.where is not None


# -- command line and layering -------------------------------------------------------------------


def test_cli_table_json_and_error_exit_status(repo: Path) -> None:
    out = mgit("query", 'select m.name where m at "HEAD" order by m.name', cwd=repo).stdout
    assert out.splitlines() == [
        "m.name",
        "base",
        "ft-a",
        "ft-b",
        "ft-c",
        "grand",
        "pruned",
        "(6 rows)",
    ]
    rows = json.loads(mgit("query", "--json", 'select m where m.name = "grand"', cwd=repo).stdout)
    assert [r["name"] for r in rows] == ["grand"]
    bad = mgit("query", 'select m where m.nme = "x"', cwd=repo, check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines()[1:] == ['  select m where m.nme = "x"', "                 ^^^^^"]


def test_select_needs_no_torch_and_the_filter_no_lark(repo: Path) -> None:
    code = (
        "import sys, git_mgit\n"
        f"rows = git_mgit.query('select m where m[\"body.*\"].count = 2', repo={str(repo)!r}).rows\n"
        "print(len(rows), 'torch' in sys.modules)\n"
        "import git_mgit.cli.filter_process, git_mgit.filters.process\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["8", "False"]
    filters = subprocess.run(
        [sys.executable, "-c", "import sys, git_mgit.cli.filter_process, git_mgit.filters.process;"
         "print('lark' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert filters.stdout.strip() == "False"
