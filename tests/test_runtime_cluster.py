"""The runtime on a real multi-node Dask cluster (loopback only): the same answers as the local
backend, objects fetched per node for the versions it was given, and a node killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from git_mgit.gitcmd import find_repo
from git_mgit.lineage import Lineage, commit_model
from git_mgit.lineage.save import ModelFile, commit_files, lineage_records, record_many
from git_mgit.runtime import targets
from git_mgit.runtime.execution.localcluster import Cluster, cluster
from git_mgit.runtime.testing import Runner
from git_mgit.store.lookup import anchor_objects, anchor_tips
from tests.gitsandbox import run_git
from tests.mgitrepo import mgit
from tests.runtime_repo import family, isolated_home, plant_fp16_overflow, working_copy

SHARDED = "models/sharded"
INDEX = "model.safetensors.index.json"
DERIVED = ["ft-a", "ft-b", "grand", "head-x", "head-y", "pruned", "sharded"]


def add_sharded_folder(repo: Path) -> None:
    """`sharded`: a fine-tune of base kept as a two-shard Hugging Face folder."""
    config = repo / "mgit.toml"
    config.write_text(
        config.read_text()
        + f'\n[models.sharded]\npath = "{SHARDED}/"\ntype = "mlp"\nparents = ["base"]\n'
        'creation = "train:finetune"\n'
    )
    run_git("commit", "-q", "-am", "declare the sharded folder", cwd=repo)
    sys.path.insert(0, str(repo))
    try:
        import nets  # type: ignore[import-not-found]
        import train  # type: ignore[import-not-found]

        lin = Lineage(find_repo(repo))
        base = nets.MLP()
        base.load_state_dict(load_file(repo / "models/base.safetensors"))
        state = train.finetune(base).state_dict()
    finally:
        sys.path.remove(str(repo))
        for name in ("nets", "train"):
            sys.modules.pop(name, None)
    names = sorted(state)
    parts = {
        "model-00001-of-00002.safetensors": names[:2],
        "model-00002-of-00002.safetensors": names[2:],
    }
    files = [
        ModelFile(f"{SHARDED}/{shard}", {n: state[n] for n in part}, {"format": "pt"})
        for shard, part in parts.items()
    ]
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
        "weight_map": {n: shard for shard, part in parts.items() for n in part},
    }
    plain = {
        f"{SHARDED}/{INDEX}": (json.dumps(index, indent=2, sort_keys=True) + "\n").encode(),
        f"{SHARDED}/config.json": b'{"model_type": "mlp"}\n',
    }
    commit, _ = commit_files(lin.repo, files, "sharded fine-tune of base", plain=plain)
    run_git("reset", "-q", "--hard", cwd=repo)
    version = run_git("rev-parse", f"{commit}:{SHARDED}", cwd=repo).stdout.strip()
    recs = lineage_records(
        SHARDED, [lin.resolve("base")], "train:finetune", f"{commit}^", kind="folder"
    )
    record_many(lin, {version: recs}, f"save {SHARDED}")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with isolated_home(tmp_path_factory.mktemp("template-home")):
        repo = family(tmp_path_factory.mktemp("template") / "repo")
        add_sharded_folder(repo)
        return repo


@pytest.fixture(scope="module")
def dask(tmp_path_factory: pytest.TempPathFactory):
    with cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def pushed_copy(template: Path, where: Path) -> Path:
    """A working copy whose remote (a bare repository) holds every version at HEAD."""
    where.mkdir()
    repo = working_copy(template, where)
    run_git("init", "-q", "--bare", str(where / "remote.git"), cwd=where)
    run_git("remote", "add", "origin", str(where / "remote.git"), cwd=repo)
    run_git("push", "-q", "origin", "main", cwd=repo)
    return repo


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    return pushed_copy(template, tmp_path / "a")


def update_base(repo: Path) -> str:
    """A new base version, committed here only (the remote does not have it)."""
    state = {k: v * 1.1 for k, v in load_file(repo / "models/base.safetensors").items()}
    lin = Lineage(find_repo(repo))
    return commit_model(state, repo / "models/base.safetensors", "update base", lineage=lin).version


def branch_versions(repo: Path, branch: str) -> dict[str, str]:
    """model -> its version on the branch (a manifest blob or a folder's tree: its content)."""
    paths = {m: f"models/{m}.safetensors" for m in DERIVED} | {"sharded": SHARDED}
    return {
        m: run_git("rev-parse", f"{branch}:{p}", cwd=repo).stdout.strip() for m, p in paths.items()
    }


def cascade_commits(repo: Path, branch: str) -> Counter:
    log = run_git("log", "--format=%(trailers:key=Mgit-Cascade,valueonly)", branch, cwd=repo)
    return Counter(line.split()[1] for line in log.stdout.splitlines() if line.strip())


def chunk_hashes(lin: Lineage, version: str) -> set[bytes]:
    from git_mgit.lineage.save import version_manifests

    v = lin.resolve(version)
    return {
        c.content_hash
        for m in version_manifests(lin.repo, v.id, v.kind).values()
        for c in m.chunks()
    }


def node_hashes(cache: Path) -> set[bytes]:
    repo = find_repo(cache)
    return {h for h, _, _ in anchor_objects(repo, list(anchor_tips(repo).values()), [])}


# -- git mgit test ---------------------------------------------------------------------------


def registered_tests_on(lin: Lineage, address: str, local: list[dict]) -> tuple:
    """Every registered test at HEAD on the cluster: (targets, pairs, results, stats), after
    checking the metrics are the local backend's (`git mgit test --json` rows)."""
    runner = Runner(lin, None, address)
    try:
        chosen = targets.at_revision(lin, "HEAD")
        pairs = [(t, test) for t in chosen for test in runner.applicable(t, runner.tests())]
        results = runner.run(pairs)
        stats = runner.pool.stats
    finally:
        runner.close()
    got = {(r.target.version, r.test.name): r.metrics for r in results}
    assert got == {(row["version"], row["test"]): row["metrics"] for row in local}
    return chosen, pairs, results, stats


def test_tests_on_two_nodes_match_the_local_backend_and_fetch_only_their_versions(
    repo: Path, template: Path, tmp_path: Path, dask: Cluster
) -> None:
    local = json.loads(mgit("test", "--json", "--jobs", "2", cwd=repo).stdout)

    other = pushed_copy(template, tmp_path / "b")
    lin = Lineage(find_repo(other))
    chosen, pairs, results, stats = registered_tests_on(lin, dask.address, local)
    here, there = Lineage(find_repo(repo)), Lineage(find_repo(other))
    for r in results:
        assert there.recorded_test(r.target.version, r.test.name, r.code) == r.metrics
        assert here.recorded_test(r.target.version, r.test.name, r.code) == r.metrics

    # both nodes worked, each in its own folder; objects came from the remote only
    assert len(stats.jobs) == 2 and sum(stats.jobs.values()) == len(pairs)
    assert sum(stats.remote.values()) > 0 and sum(stats.head.values()) == 0
    everything = {v: chunk_hashes(lin, v) for v in {t.version for t in chosen}}
    for node in dask.nodes:
        given = stats.given[node.address]
        held = node_hashes(dask.cache(node))
        assert held, node
        # what a node holds is what its versions read (their delta bases may be their parents')
        allowed = set().union(*(everything[v] for v in given))
        allowed |= set().union(*(chunk_hashes(lin, p) for v in given for p in lin.graph.parents(v)))
        assert held <= allowed
        assert held >= set().union(*(everything[v] for v in given))
        others = set().union(*(everything[v] for v in everything if v not in given)) - allowed
        assert not held & others


def test_versions_the_remote_no_longer_serves_come_from_the_head(
    repo: Path, tmp_path: Path, dask: Cluster
) -> None:
    lin = Lineage(find_repo(repo))
    path = repo / "models/grand.safetensors"
    state = {k: v * 1.5 for k, v in load_file(path).items()}  # no node has seen it
    fresh = commit_model(state, path, "a fresh grand", lineage=lin).version
    run_git("push", "-q", "origin", "main", cwd=repo)
    runner = Runner(lin, None, dask.address)
    try:
        pool = runner.pool  # it listed the remote's versions: the fresh one is there
        assert pool.shipper.published.holds(fresh)
        (tmp_path / "a" / "remote.git").rename(tmp_path / "gone.git")  # the nodes' fetch fails
        (result,) = runner.run([(targets.target(lin, fresh), runner.tests("accuracy")[0])])
        stats = pool.stats
    finally:
        runner.close()
    assert result.verdict[0] == "pass", result.error
    assert sum(stats.jobs.values()) == 1  # answered once, after going back once
    assert sum(stats.remote.values()) == 0 and sum(stats.head.values()) > 0


# -- git mgit cascade ------------------------------------------------------------------------


def test_cascade_on_the_cluster_is_bit_identical_to_the_local_one_sharded_folder_too(
    repo: Path, template: Path, tmp_path: Path, dask: Cluster
) -> None:
    old_index = json.loads(run_git("show", f"HEAD:{SHARDED}/{INDEX}", cwd=repo).stdout)
    update_base(repo)
    local = mgit("cascade", "base", "--jobs", "2", cwd=repo)
    branch = local.stdout.split("onto branch ")[1].split()[0]

    other = pushed_copy(template, tmp_path / "b")
    update_base(other)
    there = mgit("cascade", "base", "--cluster", dask.address, cwd=other)
    assert branch in there.stdout
    assert "job(s) on 2 node(s)" in there.stderr
    assert "from here 0 B" not in there.stderr  # the new base went from the head as a pack

    assert branch_versions(other, branch) == branch_versions(repo, branch)  # bit-identical
    assert cascade_commits(other, branch) == cascade_commits(repo, branch)
    assert set(cascade_commits(other, branch).values()) == {1} and len(
        cascade_commits(other, branch)
    ) == len(DERIVED)

    # the folder keeps its layout: the same shards, the index names where each tensor is
    lin = Lineage(find_repo(other))
    files = run_git("ls-tree", "--name-only", f"{branch}:{SHARDED}", cwd=other).stdout.split()
    assert files == sorted({INDEX, "config.json", *old_index["weight_map"].values()})
    new_index = json.loads(run_git("show", f"{branch}:{SHARDED}/{INDEX}", cwd=other).stdout)
    assert new_index["weight_map"] == old_index["weight_map"]
    new = lin.resolve(f"{branch}:{SHARDED}")
    assert new.kind == "folder"
    assert lin.graph.parents(new.id, ("provenance",)) == [
        lin.resolve(f"{branch}:models/base.safetensors").id
    ]
    run_git("checkout", "-q", branch, cwd=other)
    shards = {}
    for shard in set(new_index["weight_map"].values()):
        shards.update(load_file(other / SHARDED / shard))
    assert set(shards) == set(new_index["weight_map"])
    old = {}
    for shard in set(old_index["weight_map"].values()):
        old.update(load_file(template / SHARDED / shard))
    assert any(not torch.equal(shards[n], old[n]) for n in shards)  # re-derived from the new base
    mgit("fsck", cwd=other)


# -- git mgit bisect -------------------------------------------------------------------------


def test_bisect_on_the_cluster_finds_the_same_culprit_in_fewer_rounds(
    repo: Path, dask: Cluster
) -> None:
    made = plant_fp16_overflow(repo)
    args = ("bisect", "--test", "fp16", "grand", "--json", "--cluster", dask.address)
    there = json.loads(mgit(*args, cwd=repo).stdout)
    assert there["first_bad"] == made[7]
    assert there["workers"] == 2 and there["rounds"] < there["runs"]
    local = json.loads(mgit("bisect", "--test", "fp16", "grand", "--json", cwd=repo).stdout)
    assert local["first_bad"] == made[7] and local["rounds"] == local["runs"]


# -- failures --------------------------------------------------------------------------------


def test_a_node_killed_mid_cascade_and_the_cascade_still_completes_once(
    repo: Path, template: Path, tmp_path: Path
) -> None:
    update_base(repo)
    local = mgit("cascade", "base", "--jobs", "2", cwd=repo)
    branch = local.stdout.split("onto branch ")[1].split()[0]

    other = pushed_copy(template, tmp_path / "b")
    update_base(other)
    log = tmp_path / "calls.log"
    env = {"CASCADE_LOG": str(log), "CASCADE_SLEEP": "1.5"}
    with cluster(tmp_path / "cluster", env=env) as c:
        proc = subprocess.Popen(
            ["git", "mgit", "cascade", "base", "--cluster", c.address],
            cwd=other, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not log.exists() or not log.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        first_pid = int(log.read_text().split()[1])
        victim = c.node_of(first_pid)
        c.kill(victim)
        _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    calls = [line.split() for line in log.read_text().splitlines()]
    units = len(DERIVED) - 1  # head-x and head-y are one call
    assert len(calls) > units  # the killed node's job ran again elsewhere
    assert cascade_commits(other, branch) == Counter(
        dict.fromkeys(cascade_commits(repo, branch), 1)
    )
    assert branch_versions(other, branch) == branch_versions(repo, branch)


def test_data_kept_on_the_cluster_is_sent_again_when_its_node_dies(tmp_path: Path) -> None:
    """A pack or the code lives on the nodes Dask put it on: lost with them, it is made and
    sent again on the next use, instead of every later job being cancelled."""
    from git_mgit.runtime.execution.cluster import Kept, connect

    made = []

    def make() -> bytes:
        made.append(1)
        return b"a pack" * 1000

    with cluster(tmp_path / "cluster") as c:
        client = connect(c.address)
        try:
            kept = Kept(client, make)
            first = kept.future()
            (holder,) = client.who_has(first)[first.key]
            c.kill(next(n for n in c.nodes if n.address == holder))
            deadline = time.monotonic() + 30
            while first.status == "finished" and time.monotonic() < deadline:
                time.sleep(0.05)  # until the scheduler tells this client
            assert first.status in ("cancelled", "lost")
            again = kept.future()
            assert again.key != first.key and len(made) == 2
            assert client.submit(len, again, pure=False).result(timeout=30) == 6000
        finally:
            client.close()


def test_an_unreachable_cluster_is_one_clear_line(repo: Path) -> None:
    env = {**os.environ, "GIT_MGIT_CLUSTER_TIMEOUT": "1"}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    for args, said in (
        (
            ["--cluster", "tcp://127.0.0.1:9"],
            "cannot reach the Dask scheduler at tcp://127.0.0.1:9",
        ),
        (["--cluster"], "--cluster needs the scheduler"),
    ):
        proc = subprocess.run(
            ["git", "mgit", "test", *args], cwd=repo, capture_output=True, text=True, env=env
        )
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], proc.stderr


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children, theirs, ...), as /proc has them now."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue  # gone meanwhile
    found: set[int] = set()
    todo = [pid]
    while todo:
        above = todo.pop()
        below = {p for p, pp in parent.items() if pp == above} - found
        found |= below
        todo.extend(below)
    return found


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_cluster_launcher_stops_every_process_it_started_on_a_stop_signal(
    stop: signal.Signals, tmp_path: Path
) -> None:
    """Ctrl-C, a kill and a closed terminal: the scheduler and the nodes (each in a process
    group of its own, which the terminal's signals never reach) stop with the launcher."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "git_mgit.runtime.execution.localcluster", str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started: set[int] = set()
    try:
        assert launcher.stdout is not None
        address = launcher.stdout.readline()  # printed once both nodes have joined
        assert address.startswith("tcp://127.0.0.1:"), launcher.communicate()[1]
        started = descendants(launcher.pid)
        assert len(started) >= 3  # the scheduler and two nodes
        launcher.send_signal(stop)
        assert launcher.wait(timeout=120) == 0
        assert [p for p in started if running(p)] == []
    finally:
        for pid in started | {launcher.pid}:  # never leave one behind, even when failing
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.communicate()


@pytest.mark.parametrize("store", ["lfs", "s3"])
def test_nodes_fetch_their_versions_from_a_pointer_store(
    store: str, template: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With the objects in Git LFS or S3, each node fetches the pointer refs the head names
    and downloads their objects from the store (credentials from its own environment)."""
    if store == "lfs":
        server = request.getfixturevalue("lfs_server")
        url = server.repo_url()
        run_git("config", "--global", "mgit.store", "lfs", cwd=tmp_path)
    else:
        bucket = request.getfixturevalue("s3_bucket")
        run_git("init", "-q", "--bare", str(tmp_path / "remote.git"), cwd=tmp_path)
        url = str(tmp_path / "remote.git")
        run_git("config", "--global", "mgit.store", bucket.url(), cwd=tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    repo = working_copy(template, tmp_path / "a")
    run_git("remote", "add", "origin", url, cwd=repo)
    run_git("push", "-q", "origin", "main", cwd=repo)
    names = run_git("ls-remote", url, "refs/mgit/v/*", cwd=repo).stdout.split()[1::2]
    tree = run_git("ls-tree", "-r", "--name-only", names[0], cwd=repo).stdout.split()
    assert tree and all(n.endswith(".lfs") for n in tree)  # pointers on the remote
    plain = working_copy(template, tmp_path / "b")  # the same tests run here, locally
    local = json.loads(mgit("test", "--json", "--jobs", "2", cwd=plain).stdout)
    lin = Lineage(find_repo(repo))
    with cluster(tmp_path / "cluster") as dask:  # started here: the nodes see the credentials
        _, _, _, stats = registered_tests_on(lin, dask.address, local)
        assert sum(stats.remote.values()) > 0 and sum(stats.head.values()) == 0
        for node in dask.nodes:
            given = set(stats.given[node.address])
            held = node_hashes(dask.cache(node))
            assert held >= set().union(*(chunk_hashes(lin, v) for v in given))
