"""What `install`, `uninstall`, `track` and `untrack` change, each step reversible.

Two layers, as in git-lfs: the filter and driver definitions (global by
default), and a per-repository setup (fetch refspecs for tensor object refs
and lineage notes, notes rewrite config, a `-delta` attribute for the object
trees, hooks). The filter process calls `ensure_repo` at start-up in every
repository, so right after `git clone` a repository sets itself up; that path
costs one `git config` call and a few small file reads when nothing is missing.
Every write is idempotent and nothing foreign is overwritten without `force`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, find_repo, git
from git_mgit.hooks import hookfiles
from git_mgit.hooks.hookfiles import HOOKS, RETIRED
from git_mgit.store.lookup import ANCHOR_PREFIX
from git_mgit.transfer.notes import NOTES_REF, NOTES_REMOTES, notes_refspec

FILTER_CONFIG: dict[str, str] = {
    "filter.mgit.process": "git-mgit filter-process",
    "filter.mgit.clean": "git-mgit clean -- %f",
    "filter.mgit.smudge": "git-mgit smudge -- %f",
    "filter.mgit.required": "true",
    "merge.mgit.name": "git-mgit tensor-level merge",
    "merge.mgit.driver": "git-mgit merge-driver %O %A %B %L %P",
    "diff.mgit.textconv": "git-mgit textconv",
    "diff.mgit.cachetextconv": "true",
}
_FILTER_KEYS_RE = r"^(filter|merge|diff)\.mgit\."

_REPO_KEYS_RE = r"^(remote\..+\.(url|fetch)|notes\.rewriteref|core\.hookspath)$"

# Matches the anchor trees' `ab/cd/<64 hex>` paths: their blobs are already
# compressed, so pack-objects must not spend time trying to delta them.
ATTR_COMMENT = "# git-mgit: object trees are already compressed; never delta them"
ATTR_LINE = "[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]/[0-9a-f]* -delta"

TRACK_ATTRS = ("filter=mgit", "diff=mgit", "merge=mgit", "-text")
# what `git lfs track` writes: `git mgit track` of the same pattern takes the files over,
# keeping git-lfs's line in a comment above its own, which `git mgit untrack` puts back
GIT_LFS_ATTRS = ("filter=lfs", "diff=lfs", "merge=lfs", "-text")
FROM_LFS = "# git-mgit tracks the next pattern in place of git-lfs's line: "

# Earlier versions fetched every object with every fetch; objects now come on demand.
LEGACY_OBJECTS_REFSPEC = f"+{ANCHOR_PREFIX}*:{ANCHOR_PREFIX}*"


# --- git config helpers ---------------------------------------------------


def _config(repo: Repo | None, *args: str, check: bool = True) -> str:
    """`git config ARGS` in `repo` (through it, so that its read of git config is redone),
    or outside any repository."""
    return repo.git("config", *args, check=check) if repo else git("config", *args, check=check)


def _read_config(repo: Repo | None, *args: str) -> list[tuple[str, str, str]]:
    """(scope, key, value) for each match of one `git config --get-regexp` call.

    Keys come back as git prints them: section and name lower-cased, subsection
    (a remote's name) as written. No match is not an error.
    """
    out = _config(repo, "--show-scope", "-z", *args, check=False)
    tokens = out.split("\0")[:-1]  # every entry ends in NUL
    entries = []
    for scope, item in zip(tokens[0::2], tokens[1::2], strict=True):
        key, _, value = item.partition("\n")
        entries.append((scope, key, value))
    return entries


def _scope_repo(scope: str, repo: Repo | None) -> Repo | None:
    """The repository to run `git config --<scope>` in (only --local needs one)."""
    if scope == "local" and repo is None:
        raise MgitError("--local needs a repository; run it inside one")
    return repo if scope == "local" else None


def _remove_empty_section(scope: str, section: str, repo: Repo | None) -> None:
    """Drop a section we emptied; git removes most empty headers itself on --unset
    but keeps one that holds comments, and then this call fails harmlessly."""
    _config(repo, f"--{scope}", "--remove-section", section, check=False)


def install_config(
    scope: str = "global", force: bool = False, repo: Repo | None = None
) -> list[str]:
    """Write FILTER_CONFIG into one config file; all or nothing.

    A differing value is someone else's (another tool's, or the user's own
    wrapper), so it is only overwritten with `force`.
    """
    at = _scope_repo(scope, repo)
    current: dict[str, list[str]] = defaultdict(list)
    for _, key, value in _read_config(at, f"--{scope}", "--get-regexp", _FILTER_KEYS_RE):
        current[key].append(value)
    todo, foreign = [], []
    for key, value in FILTER_CONFIG.items():
        have = current.get(key, [])
        if have == [value]:
            continue
        if have and any(v != value for v in have) and not force:
            foreign.append(f"{key} = {' / '.join(repr(v) for v in have)}")
        todo.append(key)
    if foreign:
        raise MgitError(
            f"the {scope} git config already has {', '.join(foreign)}; "
            "re-run with --force to replace them with git-mgit's"
        )
    for key in todo:
        _config(at, f"--{scope}", "--replace-all", key, FILTER_CONFIG[key])
    return [f"{scope} config: set {key} = {FILTER_CONFIG[key]}" for key in todo]


def uninstall_config(scope: str = "global", repo: Repo | None = None) -> list[str]:
    """Remove the FILTER_CONFIG keys that still hold our values, and sections left empty."""
    at = _scope_repo(scope, repo)
    entries = _read_config(at, f"--{scope}", "--get-regexp", _FILTER_KEYS_RE)
    values: dict[str, list[str]] = defaultdict(list)
    for _, key, value in entries:
        values[key].append(value)
    changes, removed = [], set()
    for key, have in values.items():
        ours = FILTER_CONFIG.get(key)
        if ours is None:
            continue
        if all(v == ours for v in have):
            _config(at, f"--{scope}", "--unset-all", key)
            removed.add(key)
            changes.append(f"{scope} config: removed {key}")
        else:
            changes.append(f"{scope} config: left {key} alone (not git-mgit's value)")
    for section in sorted({k.rsplit(".", 1)[0] for k in removed}):
        if not any(k.startswith(section + ".") for k in values.keys() - removed):
            _remove_empty_section(scope, section, at)
    return changes


# --- per-repository setup -------------------------------------------------


def _repo_state(repo: Repo) -> tuple[dict[str, list[tuple[str, str]]], list[tuple[str, str]], bool]:
    """Remotes' fetch refspecs, notes.rewriteRef values ((scope, value) pairs), and
    whether core.hooksPath is set anywhere; one git call."""
    remotes: dict[str, list[tuple[str, str]]] = {}
    fetch: dict[str, list[tuple[str, str]]] = defaultdict(list)
    rewrite: list[tuple[str, str]] = []
    hooks_path = False
    for scope, key, value in _read_config(repo, "--get-regexp", _REPO_KEYS_RE):
        if key == "notes.rewriteref":
            rewrite.append((scope, value))
        elif key == "core.hookspath":
            hooks_path = True
        elif key.endswith(".url"):
            remotes.setdefault(key[len("remote.") : -len(".url")], [])
        else:
            fetch[key[len("remote.") : -len(".fetch")]].append((scope, value))
    for name in remotes:
        remotes[name] = fetch[name]
    return remotes, rewrite, hooks_path


def _paths(repo: Repo, hooks_path: bool) -> tuple[Path, Path]:
    """Hooks folder and info/attributes file, as git resolves them.

    Without core.hooksPath both live in the common dir (what `git rev-parse
    --git-path` answers); only a configured hooksPath needs git to resolve it.
    """
    if not hooks_path:
        return repo.common_dir / "hooks", repo.common_dir / "info" / "attributes"
    out = repo.git(
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        "hooks",
        "--git-path",
        "info/attributes",
    )
    hooks, attributes = out.splitlines()
    return Path(hooks), Path(attributes)


def _ensure_attributes(path: Path) -> list[str]:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        text = b""
    if ATTR_LINE.encode() in (line.strip() for line in text.splitlines()):
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    sep = b"\n" if text and not text.endswith(b"\n") else b""
    path.write_bytes(text + sep + f"{ATTR_COMMENT}\n{ATTR_LINE}\n".encode())
    return [f"{path}: object trees marked -delta"]


def _remove_attributes(path: Path) -> list[str]:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return []
    ours = {ATTR_COMMENT.encode(), ATTR_LINE.encode()}
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if line.strip() not in ours]
    if len(kept) == len(lines):
        return []
    if any(line.strip() for line in kept):
        path.write_bytes(b"".join(kept))
    else:
        path.unlink()
    return [f"{path}: removed the -delta line for object trees"]


def ensure_repo(repo: Repo, force: bool = False) -> list[str]:
    """Set up `repo` for git-mgit; return what changed ([] when already set up).

    For every remote: the fetch refspec for its lineage notes (and none for
    object refs: objects come on demand); notes.rewriteRef so amend and rebase
    carry lineage along; the -delta attribute for object trees; our hooks,
    chaining foreign ones.
    Raises MgitError when a hook cannot be chained without `force`; callers
    on a hot path (the filter process) should warn and carry on.
    """
    remotes, rewrite, hooks_path = _repo_state(repo)
    changes = []
    for name, fetch in remotes.items():
        have = {value for _, value in fetch}
        key = f"remote.{name}.fetch"
        spec = notes_refspec(name)
        if spec not in have:
            # --replace-all with the value as its own pattern adds it once,
            # even if another process adds it at the same moment.
            repo.git("config", "--local", "--fixed-value", "--replace-all", key, spec, spec)
            changes.append(f"remote {name}: fetch {spec}")
        if ("local", LEGACY_OBJECTS_REFSPEC) in fetch:
            repo.git(
                "config", "--local", "--fixed-value", "--unset-all", key, LEGACY_OBJECTS_REFSPEC
            )
            changes.append(f"remote {name}: objects are fetched on demand now, not by every fetch")
    if NOTES_REF not in {value for _, value in rewrite}:
        repo.git(
            "config",
            "--local",
            "--fixed-value",
            "--replace-all",
            "notes.rewriteRef",
            NOTES_REF,
            NOTES_REF,
        )
        changes.append(f"notes.rewriteRef = {NOTES_REF} (lineage follows amend and rebase)")
    hooks_dir, attributes = _paths(repo, hooks_path)
    changes += _ensure_attributes(attributes)
    for hook in HOOKS:
        change = hookfiles.install(hooks_dir, hook, force)
        if change:
            changes.append(change)
    for hook in RETIRED:
        change = hookfiles.remove(hooks_dir, hook)
        if change:
            changes.append(change)
    return changes


def remove_repo(repo: Repo) -> list[str]:
    """Undo ensure_repo: refspecs, rewriteRef, attribute line, hooks (restoring chained ones).

    Object refs, notes and fetched data stay: removing git-mgit must never lose a model.
    """
    remotes, rewrite, hooks_path = _repo_state(repo)
    changes = []
    for name, fetch in remotes.items():
        for scope, spec in fetch:
            if scope == "local" and (
                spec == LEGACY_OBJECTS_REFSPEC or spec.startswith(f"+{NOTES_REF}*:{NOTES_REMOTES}")
            ):
                repo.git(
                    "config",
                    "--local",
                    "--fixed-value",
                    "--unset-all",
                    f"remote.{name}.fetch",
                    spec,
                )
                changes.append(f"remote {name}: removed fetch {spec}")
    if ("local", NOTES_REF) in rewrite:
        repo.git("config", "--local", "--fixed-value", "--unset-all", "notes.rewriteRef", NOTES_REF)
        if not _read_config(repo, "--local", "--get-regexp", r"^notes\."):
            _remove_empty_section("local", "notes", repo)
        changes.append(f"removed notes.rewriteRef = {NOTES_REF}")
    hooks_dir, attributes = _paths(repo, hooks_path)
    changes += _remove_attributes(attributes)
    for hook in (*HOOKS, *RETIRED):
        change = hookfiles.remove(hooks_dir, hook)
        if change:
            changes.append(change)
    return changes


# --- .gitattributes -------------------------------------------------------


def escape_pattern(pattern: str) -> str:
    """Write `pattern` as one gitattributes token (git-lfs's escaping).

    Whitespace separates attributes, so it becomes [[:space:]]; a leading #, !
    or " would read as a comment, a negation or a quoted pattern.
    """
    if not pattern or pattern.endswith("/"):
        raise MgitError(
            f'"{pattern}": gitattributes patterns never match files inside a folder; '
            f'track "{pattern.rstrip("/") or "folder"}/**" instead'
        )
    out = "".join("[[:space:]]" if ch.isspace() else ch for ch in pattern)
    return "\\" + out if out[0] in '#!"' else out


def attribute_line(line: str) -> tuple[str, list[str]]:
    """(pattern, attributes) of one gitattributes line; ("", []) for blanks and comments."""
    text = line.strip()
    if not text or text.startswith("#"):
        return "", []
    if text.startswith('"'):  # C-quoted pattern: find the closing quote
        i = 1
        while i < len(text) and text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        return text[: i + 1], text[i + 1 :].split()
    pattern, *attrs = text.split()
    return pattern, attrs


def _attributes_file(repo: Repo) -> Path:
    if repo.worktree is None:
        raise MgitError(
            f"{repo.git_dir} is a bare repository; track patterns in a clone with a work tree"
        )
    return repo.worktree / ".gitattributes"


def _read_lines(path: Path) -> tuple[list[str], str]:
    """Lines without their endings, and the file's line ending (kept on rewrite)."""
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return [], "\n"
    newline = "\r\n" if "\r\n" in text else "\n"
    return text.splitlines(), newline


def _write_lines(path: Path, lines: list[str], newline: str) -> None:
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8", "surrogateescape"))


def track(repo: Repo, patterns: list[str], force: bool = False) -> list[tuple[str, str]]:
    """Add `PATTERN filter=mgit diff=mgit merge=mgit -text` lines to the top-level .gitattributes.

    Returns (pattern, "added" | "replaced" | "from-lfs" | "already") per pattern.
    A pattern git-lfs tracks (its own line, as `git lfs track` writes it: every
    model repository on the Hugging Face Hub has one for *.safetensors) is taken
    over; one with other attributes is replaced only with `force`. Nothing is
    written unless every pattern can be.
    """
    path = _attributes_file(repo)
    lines, newline = _read_lines(path)
    want = " ".join(TRACK_ATTRS)
    results, conflicts = [], []
    for pattern in dict.fromkeys(patterns):
        token = escape_pattern(pattern)
        parsed = [attribute_line(line) for line in lines]
        at = [i for i, (p, _) in enumerate(parsed) if p == token]
        git_lfs = bool(at) and all(set(parsed[i][1]) == set(GIT_LFS_ATTRS) for i in at)
        if len(at) == 1 and set(parsed[at[0]][1]) == set(TRACK_ATTRS):
            results.append((pattern, "already"))
        elif not at:
            lines.append(f"{token} {want}")
            results.append((pattern, "added"))
        elif git_lfs or force:
            theirs = lines[at[0]].strip()
            lines[at[0]] = f"{token} {want}"
            for i in reversed(at[1:]):
                del lines[i]
            if git_lfs:
                lines.insert(at[0], FROM_LFS + theirs)
            results.append((pattern, "from-lfs" if git_lfs else "replaced"))
        else:
            conflicts.append(f'"{lines[at[-1]].strip()}"')
    if conflicts:
        raise MgitError(
            f"{path} already has {', '.join(conflicts)}; re-run with --force to replace its attributes"
        )
    if any(status != "already" for _, status in results):
        _write_lines(path, lines, newline)
    return results


def untrack(repo: Repo, patterns: list[str]) -> list[tuple[str, str]]:
    """Remove the top-level .gitattributes lines that track `patterns`; all or nothing.

    Returns (pattern, "removed" | "to-lfs") per pattern: a pattern `track` took over from
    git-lfs gets git-lfs's line back, as it was.
    """
    path = _attributes_file(repo)
    lines, newline = _read_lines(path)
    parsed = [attribute_line(line) for line in lines]
    drop, missing, results = set(), [], []
    for pattern in dict.fromkeys(patterns):
        tokens = {pattern, escape_pattern(pattern)}
        found = {i for i, (p, attrs) in enumerate(parsed) if p in tokens and "filter=mgit" in attrs}
        if not found:
            missing.append(f'"{pattern}"')
        given_back = False
        for i in found:
            theirs = kept_lfs_line(lines[i - 1]) if i else None
            if theirs is not None and attribute_line(theirs)[0] in tokens:
                lines[i - 1], given_back = theirs, True
        results.append((pattern, "to-lfs" if given_back else "removed"))
        drop |= found
    if missing:
        raise MgitError(
            f"{', '.join(missing)} not tracked by git-mgit in {path}; see git mgit track"
        )
    _write_lines(path, [line for i, line in enumerate(lines) if i not in drop], newline)
    return results


def kept_lfs_line(line: str) -> str | None:
    """The git-lfs line that `track` kept in `line` (its FROM_LFS comment), else None."""
    text = line.strip()
    return text[len(FROM_LFS) :] if text.startswith(FROM_LFS) else None


def tracked_patterns(repo: Repo) -> list[tuple[str, str]]:
    """(pattern, file) for every filter=mgit line in the repository's attributes files.

    Patterns in a subfolder's .gitattributes are relative to that folder, so
    the file is part of the answer.
    """
    sources = [(repo.common_dir / "info" / "attributes", "info/attributes")]
    if repo.worktree is not None:
        out = repo.git(
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            ":(glob)**/.gitattributes",
        )
        names = sorted(set(out.split("\0")) - {""}, key=lambda f: (f.count("/"), f))
        sources = [(repo.worktree / name, name) for name in names] + sources
    found = []
    for path, name in sources:
        for line in _read_lines(path)[0]:
            pattern, attrs = attribute_line(line)
            if "filter=mgit" in attrs and not pattern.startswith("[attr]"):
                found.append((pattern, name))
    return found


def index_matches(repo: Repo, patterns: list[str]) -> list[str]:
    """Paths in the index that match `patterns` (gitattributes semantics) and now get filter=mgit.

    A throwaway core.attributesFile sets a probe attribute on exactly those
    patterns, so git itself does the matching.
    """
    import tempfile  # 5 ms to import; the filter process imports this module at start-up

    with tempfile.NamedTemporaryFile("w", suffix=".attributes", delete=False) as probe:
        probe.write("".join(f"{escape_pattern(p)} mgit-track-probe\n" for p in patterns))
    try:
        out = repo.git(
            "-c",
            f"core.attributesFile={probe.name}",
            "ls-files",
            "-z",
            "--",
            ":(attr:mgit-track-probe filter=mgit)",
        )
    finally:
        os.unlink(probe.name)
    return [p for p in out.split("\0") if p]


def renormalize(repo: Repo, paths: list[str]) -> None:
    """Re-run the clean filter on index entries, so they are stored as tensor objects."""
    repo.git(
        "add",
        "--renormalize",
        "--pathspec-from-file=-",
        "--pathspec-file-nul",
        input="\0".join(paths).encode("utf-8", "surrogateescape"),
        env={"GIT_LITERAL_PATHSPECS": "1"},
    )


def repo_here() -> Repo | None:
    """The repository around the current directory, or None outside any."""
    try:
        return find_repo()
    except MgitError:
        return None
