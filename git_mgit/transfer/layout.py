"""How a push lays model versions out on a remote, planned from estimates before writing.

The version at a pushed tip is published whole (on a store that keeps what a
push replaces, it may go out as `git add` stored it, a delta of the remote's
whole previous tip: `_tip`). Every other version is
published, where it can be, as this clone stores it (`stored_forms`): whole,
or as deltas of the version before it, with the objects `git add` wrote, so
that nothing is encoded; decided oldest first, when its fetch cost (its own
objects plus its base's, recursively) stays within the budget times its size
and its chain within mgit.maxChainDepth versions. A version that does not fit
is published whole, so that those after it lean on it as stored, or, when a
whole version comes close after it, as deltas of the next version (its
successor), like the rest: those are decided newest first, so a base's cost
is known when its older versions choose it, and a delta must save at least
10%. They never lean on a version published as stored with a base, which may
lean on them. The remote's previous tip, whole until now, may be re-published
as a delta of the first new version after it under the same rule, counting
the versions already chained onto it, when that one is whole.

Sizes are estimated the way the encoder decides: on the chunks' sample
windows (codecs.estimate_*), decoding each chunk once, one tensor at a time;
what a version stored as it is costs is its objects' sizes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from git_mgit import codecs  # the encoder loads at the first estimate it makes
from git_mgit.console.progress import Progress
from git_mgit.modelfile import manifest as mf
from git_mgit.store.chains import Key, hashes, keyed, own_objects
from git_mgit.store.chunkstore import ChunkStore
from git_mgit.store.decoded import DecodedChunks, Readable
from git_mgit.transfer.history import Version

SAVING = 0.9  # a delta version must store at most this much of its whole size
REACH = 0.9  # a tip published as a delta: a fresh clone of it fetches at most this much of its file


@dataclass(frozen=True)
class Stored:
    """A version as this clone stores it, which a push publishes without encoding a byte."""

    base: str | None  # the older version its deltas lean on; None: every chunk whole here
    own: float  # bytes of its objects that its base does not file


@dataclass
class Candidates:
    """What a push may publish, and how its versions may lean on each other."""

    versions: dict[str, Version]  # every version involved, by id
    publish: list[str]  # versions to publish, oldest first
    tips: set[str]  # must be published whole
    children: dict[str, list[str]] = field(default_factory=dict)  # version -> possible bases
    rotations: dict[str, int] = field(
        default_factory=dict
    )  # remote's whole version -> levels hanging on it
    replaced: dict[str, str] = field(default_factory=dict)  # rotation -> remote ref it replaces
    retire: dict[str, str] = field(default_factory=dict)  # whole refs no tip needs any more
    # tip -> versions of its declared parent models at the same commit, whole: a fine-tune
    # and its base are checked out together, so the fine-tune may be a delta of the base
    family: dict[str, list[str]] = field(default_factory=dict)
    # version -> the version before it that `git add` stored it against, where the push
    # publishes that one or the remote holds it whole
    parents: dict[str, str] = field(default_factory=dict)
    stored: dict[str, Stored] = field(default_factory=dict)  # set by stored_forms()
    # the store keeps what a push replaces (Git LFS, a bucket): a tip may go out as `git add`
    # stored it, a delta of a version the remote holds whole (see _tip)
    lean_tips: bool = False

    def order(self) -> list[str]:
        """Every version to decide, oldest first (rotations before what they lean on), the
        tips with a family base first: decided newest first, they come after their bases."""
        rest = [v for v in self.publish if v not in self.rotations and v not in self.family]
        return [*(v for v in self.publish if v in self.family), *self.rotations, *rest]

    def bases(self, v: str) -> list[str]:
        """The versions `v` may be published as a delta of."""
        return [*self.children.get(v, ()), *self.family.get(v, ())]


@dataclass
class Estimates:
    raw: dict[str, int] = field(default_factory=dict)  # version -> its size as a file
    whole: dict[str, float] = field(default_factory=dict)  # version -> stored whole
    delta: dict[tuple[str, str], float] = field(
        default_factory=dict
    )  # (version, base) -> stored as its delta


@dataclass(frozen=True)
class Choice:
    base: str | None  # None: published whole
    cost: float  # estimated bytes its checkout fetches into an empty clone
    levels: int  # versions below it on its chain
    stored: bool = False  # its objects are the ones this clone stores (nothing encoded)

    @property
    def forward(self) -> bool:
        """Leaning on an older version: a newer one must not lean on it in turn."""
        return self.stored and self.base is not None


@dataclass
class Plan:
    choices: dict[str, Choice]  # every version to (re)publish
    replaced: dict[str, str]  # re-published version -> the remote ref it replaces

    def push_order(self) -> list[str]:
        """Bases before the versions leaning on them, so a remote never lacks a base."""
        done: list[str] = []
        seen: set[str] = set()

        def visit(v: str) -> None:
            if v in seen:
                return
            seen.add(v)
            base = self.choices[v].base
            if base is not None and base in self.choices:
                visit(base)
            done.append(v)

        for v in sorted(self.choices, key=lambda v: self.choices[v].levels):
            visit(v)
        return done


def decide(cands: Candidates, est: Estimates, budget: float, max_levels: int) -> Plan:
    """Choose whole or a base for every candidate version: as stored where it fits (oldest
    first), then the rest newest first."""
    choices = _forward(cands, est, budget, max_levels)
    replaced: dict[str, str] = {}
    for v in reversed(cands.order()):
        if v in choices:
            continue
        whole = Choice(None, est.whole[v], 0)
        best = whole
        options = cands.family.get(v, ()) if v in cands.tips else cands.children.get(v, ())
        for n in options:
            below = choices.get(n)
            if below is None and n in cands.family.get(v, ()) and n not in cands.publish:
                below = Choice(None, est.whole[n], 0)  # published whole on the remote already
            r = est.delta.get((v, n))
            if below is None or below.forward or r is None or r > SAVING * est.whole[v]:
                continue
            if v in cands.tips and below.base is not None:
                continue  # a tip leans only on a whole version
            hang = cands.rotations.get(v, 0) * r  # older versions chained onto it
            option = Choice(n, r + below.cost, below.levels + 1)
            fits = option.levels <= max_levels and hang + option.cost <= budget * est.raw[v]
            if fits and (best.base is None or r < est.delta[v, best.base]):
                best = option
        if v in cands.rotations:
            if best.base is None:
                continue  # stays as the remote has it
            replaced[v] = cands.replaced[v]
        choices[v] = best
    return Plan(choices, {**cands.retire, **replaced})


def _forward(
    cands: Candidates, est: Estimates, budget: float, max_levels: int
) -> dict[str, Choice]:
    """The versions published whole or as this clone stores them, decided oldest first.

    Tips (but a fine-tune's, which may lean on its base) and versions stored whole
    here are whole. A version stored as deltas of the one before is published so
    when that one is decided and the chain fits; one that does not fit is left to
    decide() when a whole version close after it can take it as deltas of its
    successors, and is otherwise whole, so that those after it lean on it."""
    choices: dict[str, Choice] = {}
    later = set(cands.rotations) | set(cands.family)
    leaned_on = {f.base for f in cands.stored.values() if f.base is not None}
    for v in cands.publish:
        form = cands.stored.get(v)
        if v in later:
            continue
        if v in cands.tips:
            choices[v] = _tip(cands, est, v, max_levels)
        elif form is not None and form.base is None:
            choices[v] = Choice(None, est.whole[v], 0)
    for v in cands.order():
        form = cands.stored.get(v)
        if v in choices or v in later or form is None or form.base is None:
            continue
        below = choices.get(form.base)
        if below is None and form.base not in cands.publish:
            below = Choice(None, est.whole[form.base], 0)  # whole on the remote
        if below is not None:  # whole, or as stored: nothing here leans on a newer version yet
            option = Choice(form.base, form.own + below.cost, below.levels + 1, stored=True)
            if option.levels <= max_levels and option.cost <= budget * est.raw[v]:
                choices[v] = option
                continue
        if v in leaned_on and not _reaches_whole(cands, est, choices, v, budget, max_levels):
            choices[v] = Choice(None, est.whole[v], 0)
    return choices


def _tip(cands: Candidates, est: Estimates, v: str, max_levels: int) -> Choice:
    """A tip is published whole, so a fresh clone fetches one version. On a store that keeps
    what a push replaces, the remote's previous tip stays whole there anyway: a new tip that
    `git add` stored as deltas of it goes out as stored (nothing encoded; the store, the push
    and a pull grow by the delta, not by another whole version) where the delta saves 10% and
    a fresh clone of the tip, base included, fetches at most REACH of its file (within any
    mgit.fetchBudget, which is at least 1). The tip after it finds no whole base on the
    remote, and goes out whole."""
    whole = Choice(None, est.whole[v], 0)
    form = cands.stored.get(v)
    if not cands.lean_tips or form is None or form.base is None or form.base in cands.publish:
        return whole  # leaning on nothing, or on a version this push publishes too
    option = Choice(form.base, form.own + est.whole[form.base], 1, stored=True)
    reach = REACH * est.raw[v]
    if max_levels >= 1 and form.own <= SAVING * est.whole[v] and option.cost <= reach:
        return option
    return whole


def _reaches_whole(
    cands: Candidates,
    est: Estimates,
    choices: dict[str, Choice],
    v: str,
    budget: float,
    max_levels: int,
) -> bool:
    """Whether `v` fits as deltas of its successors down to a version decided whole."""
    cost, levels, at = 0.0, 0, v
    while levels < max_levels and cost <= budget * est.raw[v]:
        nexts = cands.children.get(at, [])
        r = est.delta.get((at, nexts[0])) if len(nexts) == 1 else None
        if r is None or r > SAVING * est.whole[at]:
            return False
        cost, levels, at = cost + r, levels + 1, nexts[0]
        below = choices.get(at)
        if below is not None:
            return below.base is None and cost + below.cost <= budget * est.raw[v]
    return False


def stored_forms(store: ChunkStore, cands: Candidates) -> dict[str, Stored]:
    """How this clone stores each version to publish, where a push can send it as it is:
    every chunk its parent lacks held as a delta of the parent's chunk of the same tensor
    or whole (a delta form), else every chunk held whole (a whole form). A delta form
    whose objects are all whole is taken as a whole form where there is one."""
    out: dict[str, Stored] = {}
    for v in cands.publish:
        m = cands.versions[v].manifest
        whole = own_objects(store, m, None)
        p = cands.parents.get(v)
        delta = None if p is None else own_objects(store, m, cands.versions[p].manifest)
        if delta is not None and (delta[1] or whole is None):
            out[v] = Stored(p, delta[0])
        elif whole is not None:
            out[v] = Stored(None, whole[0])
    return out


def groups(
    cands: Candidates, versions: list[str]
) -> Iterator[tuple[Key, list[tuple[str, mf.Chunk]]]]:
    """Per chunk key, the versions that have it (in `versions` order) with their chunk.

    One tensor at a time: memory holds one key's chunks across versions.
    """
    by_key: dict[Key, list[tuple[str, mf.Chunk]]] = defaultdict(list)
    for v in versions:
        for key, chunk in keyed(cands.versions[v].manifest).items():
            by_key[key].append((v, chunk))
    yield from by_key.items()


def estimate(
    store: ChunkStore,
    cands: Candidates,
    max_depth: int,
    read: Readable | None = None,
    there: Mapping[bytes, int] | None = None,
) -> Estimates:
    """Estimated sizes: each version whole, and each (version, possible base) as its delta.

    What this clone stores says most of it without decoding anything: a chunk stored
    whole is its object's size; a delta of two chunks is the size of the object storing
    one as a delta of the other (XOR and integer subtraction are symmetric, so the delta
    the other way round is the same size), or does not pay where `git add` found so (it
    stored the newer chunk whole, with the older one as its candidate base and room in
    the chain below `max_depth`); a step between consecutive versions that `git add` stored
    whole at the depth cap is about as large as the tensor's other steps (their median);
    a chunk stored only as a delta is about as large whole as the same tensor's chunk in
    the nearest version stored whole. The rest is estimated the way the encoder decides,
    on the chunks' sample windows.
    """
    order = cands.order()
    involved = list(
        dict.fromkeys(
            [*order, *(n for v in order for n in cands.bases(v)), *cands.parents.values()]
        )
    )
    est = Estimates()
    whole_of: dict[bytes, float] = {}
    delta_of: dict[tuple[bytes, bytes], float] = {}
    pairs = [(v, n) for v in order for n in cands.bases(v)]
    by_key = list(groups(cands, involved))
    total = sum(c.length for _, group in by_key for _, c in group)
    progress = Progress("git-mgit: planning the push", total)
    sampler = _Sampler(store, read)
    try:
        for key, group in by_key:
            chunks = [c.content_hash for _, c in group]
            stored = _stored_whole(store, chunks)
            # whole on the remote's blob store, by its pointers: not decoded to be sampled
            stored.update((h, there[h]) for h in chunks if there and h in there and h not in stored)
            whole_of.update(stored)
            at = {v: c.content_hash for v, c in group}
            unknown: list[tuple[bytes, bytes, bool]] = []
            steps: list[float] = []  # this tensor's stored deltas between consecutive versions
            for v, n in pairs:
                a, b = at.get(v), at.get(n)
                if a is not None and b is not None and a != b and (a, b) not in delta_of:
                    step = n in cands.children.get(v, ())  # `git add` of n had v as its base
                    known = _stored_delta(store, a, b)
                    if (
                        known is None
                        and step
                        and b in stored
                        and _add_kept_whole(store, a, max_depth)
                    ):
                        known = stored[b]  # the delta did not pay
                    if known is None:
                        unknown.append((a, b, step))
                        continue
                    delta_of[a, b] = known
                    if step:
                        steps.append(known)
            for a, b, step in unknown:
                if step and steps:
                    # Stored whole at the chain's depth cap: a step of training changes a
                    # tensor about as much as the steps beside it, whose deltas are stored.
                    delta_of[a, b] = sorted(steps)[len(steps) // 2]
                    continue
                smp, scale = sampler.get(a, key[2])
                delta_of[a, b] = (
                    codecs.estimate_delta(smp, key[2], sampler.get(b, key[2])[0]) * scale
                )
            for i, h in enumerate(chunks):
                if h not in whole_of:
                    near = _nearest(chunks, i, stored)
                    if near is None:
                        smp, scale = sampler.get(h, key[2])
                        near = codecs.estimate_whole(smp, key[2]) * scale
                    whole_of[h] = near
            progress.update(sum(c.length for _, c in group))
            sampler.forget()
    finally:
        progress.finish()
    for v in involved:
        m = cands.versions[v].manifest
        est.raw[v] = m.size
        est.whole[v] = sum(whole_of[h] for h in hashes(m))
    for v, n in pairs:
        est.delta[v, n] = own_cost(cands, v, n, whole_of, delta_of)
    return est


class _Sampler:
    """Chunks' sample windows, decoded on demand (one tensor's versions at a time)."""

    def __init__(self, store: ChunkStore, read: Readable | None) -> None:
        self.decoded = DecodedChunks(store, read=read)
        self.samples: dict[bytes, tuple[memoryview, float]] = {}

    def get(self, h: bytes, dtype: str) -> tuple[memoryview, float]:
        if h not in self.samples:
            smp, scale = codecs.sampled(self.decoded.get(h), dtype)
            self.samples[h] = (memoryview(bytes(smp)), scale)
        return self.samples[h]

    def forget(self) -> None:
        self.samples.clear()


def _stored_whole(store: ChunkStore, chunks: list[bytes]) -> dict[bytes, float]:
    """The chunks this clone stores whole, with their objects' sizes."""
    out: dict[bytes, float] = {}
    for h in chunks:
        found = store.resolve(h)
        if found is not None and found.base is None:
            out[h] = found.size
    return out


def _stored_delta(store: ChunkStore, a: bytes, b: bytes) -> float | None:
    """The size of an object here storing one of the two chunks as a delta of the other."""
    sizes = [n for _, n, base in store.holders(b) if base == a]
    sizes += [n for _, n, base in store.holders(a) if base == b]
    return float(min(sizes)) if sizes else None


def _add_kept_whole(store: ChunkStore, older: bytes, max_depth: int) -> bool:
    """Whether the chain had room for `git add` to store the chunk after `older` (its
    candidate delta base, the same tensor's chunk in the version before) as a delta of it.
    The caller knows that chunk is stored whole and as no delta of `older`: where there was
    room, the delta did not pay then, or its version started a new chain within the fetch
    budget (store/chains.py); either way it is priced whole."""
    found = store.resolve(older)
    return found is not None and found.depth + 1 <= max_depth


def _nearest(chunks: list[bytes], i: int, whole: dict[bytes, float]) -> float | None:
    """The whole size of the chunk nearest to chunks[i] (its neighbours in version order)
    that is stored whole."""
    for d in range(1, len(chunks)):
        for j in (i - d, i + d):
            if 0 <= j < len(chunks) and chunks[j] in whole:
                return whole[chunks[j]]
    return None


def own_cost(
    cands: Candidates,
    v: str,
    n: str,
    whole_of: dict[bytes, float],
    delta_of: dict[tuple[bytes, bytes], float],
) -> float:
    """What v's own objects store as a delta version of n: chunks n has cost nothing, a chunk
    with a counterpart in n its delta, the rest whole."""
    theirs = keyed(cands.versions[n].manifest)
    shared = hashes(cands.versions[n].manifest)
    total = 0.0
    seen: set[bytes] = set()
    for key, c in keyed(cands.versions[v].manifest).items():
        h = c.content_hash
        if h in shared or h in seen:
            continue
        seen.add(h)
        other = theirs.get(key)
        total += whole_of[h] if other is None else delta_of[h, other.content_hash]
    return total
