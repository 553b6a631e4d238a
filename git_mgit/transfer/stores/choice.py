"""Which store a remote's tensor objects go to, and why (`git mgit store` prints it).

In order, the first that says:

1. `remote.<name>.mgitStore`, then `mgit.store`: `refs`, `lfs`, or an S3 URL
   (`s3://bucket/prefix`, endpoint and region from `mgit.s3Endpoint` and
   `mgit.s3Region` or the URL's `?endpoint=...&region=...`); `auto` (the
   default) goes on;
2. what the remote records in `refs/mgit/store` (written by
   `git mgit store migrate` and by the first push to a pointer store), so
   every clone of a migrated repository follows it with no setup;
3. Git LFS when the remote has an LFS endpoint someone configured
   (`remote.<name>.lfsurl`, `lfs.url`, `.lfsconfig`), is on a host known
   to run one (Hugging Face, GitHub, GitLab, Bitbucket), or is one this
   repository's own use of git-lfs needs (lfs/inuse.py), unless the remote
   holds version refs already: auto keeps a remote where its versions are;
4. version refs in the remote's own git repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from git_mgit.errors import MgitError
from git_mgit.gitcmd import Repo, remote_file_name
from git_mgit.store.lookup import RECORD_REF

REFS, LFS, S3 = "refs", "lfs", "s3"


@dataclass(frozen=True)
class Choice:
    kind: str  # refs, lfs or s3
    url: str  # what pointer refs record: "lfs", or "s3://bucket/prefix?endpoint=...&region=..."
    reason: str  # why this store, for people
    guessed: bool = False  # from this repository's use of git-lfs: the remote may have none

    def describe(self) -> str:
        return {REFS: "version refs in its git repository", LFS: "its Git LFS endpoint"}.get(
            self.kind, self.url
        )


def parse_setting(value: str, key: str) -> str | None:
    """A store setting as a store URL (`refs`, `lfs`, `s3://...`); None for auto."""
    value = value.strip()
    if value in ("", "auto"):
        return None
    if value in (REFS, LFS):
        return value
    if value.startswith("s3://") and urlsplit(value).netloc:
        return value
    raise MgitError(
        f"git config {key}: {value!r} is not a store; use auto, refs, lfs or s3://bucket/prefix"
    )


def with_s3_settings(repo: Repo, url: str) -> str:
    """An S3 store URL with the endpoint and region this clone's config names (the URL's
    own query wins), so pointer refs tell other clones where the bucket is."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    for key, name in (("mgit.s3Endpoint", "endpoint"), ("mgit.s3Region", "region")):
        value = repo.config(key)
        if value and name not in query:
            query[name] = value
    path = parts.path.rstrip("/")
    return f"s3://{parts.netloc}{path}" + (
        f"?{urlencode(sorted(query.items()), safe=':/')}" if query else ""
    )


def kind_of(url: str) -> str:
    return S3 if url.startswith("s3://") else url


def choose(
    repo: Repo, remote: str, recorded: str | None = None, holds_versions: bool = False
) -> Choice:
    """The store pushes to `remote` use; `recorded` is the remote's `refs/mgit/store`;
    `holds_versions`: the remote lists version refs (with no record: the refs store's)."""
    for key in (f"remote.{remote}.mgitStore", "mgit.store"):
        value = repo.config(key)
        url = parse_setting(value, key) if value else None
        if url is not None:
            return _choice(repo, url, f"git config {key}")
    if recorded:
        return _choice(repo, recorded, f"the remote records it ({RECORD_REF})")
    from git_mgit.transfer.stores.lfs import gitconfig
    from git_mgit.transfer.stores.lfs.endpoint import endpoint_for
    from git_mgit.transfer.stores.lfs.inuse import uses_lfs

    config = gitconfig.load(repo)
    endpoint = endpoint_for(repo, remote, config=config)
    if endpoint is not None and endpoint.configured:
        return Choice(LFS, LFS, f"an LFS URL is configured ({endpoint.source})")
    if endpoint is not None and endpoint.known_host:
        return Choice(LFS, LFS, f"{endpoint.host} runs Git LFS for every repository")
    why = uses_lfs(repo, endpoint, config) if endpoint is not None else None
    if why and not holds_versions:
        return Choice(LFS, LFS, why, guessed=True)
    if why:
        return Choice(
            REFS,
            REFS,
            f"it holds version refs already, which auto keeps where they are ({why}; "
            "`git mgit store migrate --to lfs` moves them)",
        )
    return Choice(REFS, REFS, "a plain git remote: no Git LFS endpoint configured or known")


def _choice(repo: Repo, url: str, reason: str) -> Choice:
    kind = kind_of(url)
    return Choice(kind, with_s3_settings(repo, url) if kind == S3 else url, reason)


def record_text(url: str) -> str:
    """The message of the commit `refs/mgit/store` points at."""
    return f"git-mgit store\n\nstore {url}\n"


def parse_record(message: str) -> str | None:
    """The store URL a record's (or a pointer version ref's) commit message names."""
    for line in message.splitlines():
        if line.startswith("store "):
            return line[len("store ") :].strip() or None
    return None


def recorded_store(repo: Repo, remote: str, listing: dict[str, str]) -> str | None:
    """The store the remote records (`listing` holds its refs/mgit/store, if any).

    Its commit is fetched by name, which every server serves, into
    refs/mgit/stores/<remote>, when it is not here already.
    """
    commit = listing.get(RECORD_REF)
    if commit is None:
        return None
    if not repo.existing([commit]):
        from git_mgit.transfer.remotes import transfer

        local = f"refs/mgit/stores/{remote_file_name(remote)}"
        transfer(
            repo, "fetch", "--no-tags", "--no-write-fetch-head", remote, f"+{RECORD_REF}:{local}"
        )
        commit = repo.git("rev-parse", "--verify", "--quiet", local, check=False) or commit
    body = repo.cat_blobs([commit])[0]
    return parse_record(body.decode("utf-8", "replace")) if body else None
