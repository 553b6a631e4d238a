"""Survey, measure and plan: what a repack would store, without writing anything.

Shared by `git mgit repack` (which then carries the plan out) and
`git mgit du` (which reports what a repack would save).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from git_mgit.gitcmd import Repo
from git_mgit.lineage import graph as graphs
from git_mgit.planning import solve
from git_mgit.planning.graph import ROOT, Plan, Scheme
from git_mgit.repack import costs, survey
from git_mgit.store.chunkstore import ChunkStore

SETTLE_ROUNDS = 4


@dataclass
class Estimate:
    survey: survey.Survey
    costed: costs.Costed
    plan: Plan
    now: Plan  # the delta bases the objects have: its storage is what they take
    scheme: Scheme

    @property
    def current(self) -> float:
        return self.now.storage()

    @property
    def planned(self) -> float:
        """What the plan stores once carried out (its estimates without the SWITCH margin)."""
        return self.costed.settled(self.plan)

    @property
    def saving(self) -> float:
        """Bytes carrying the plan out would free (none if repack would leave things as they are)."""
        return self.current - self.planned if self.worthwhile else 0.0

    @property
    def worthwhile(self) -> bool:
        """Whether carrying the plan out changes anything for the better."""
        if [e.src for e in self.plan.chosen] == [e.src for e in self.now.chosen]:
            return False
        return self.planned < self.current or bool(self.now.violations(self.scheme))


def estimate(
    repo: Repo,
    store: ChunkStore,
    folders: Iterable[str],
    budgets: costs.Budgets,
    method: str = "best",
    scheme: Scheme = Scheme.INDEPENDENT,
    max_depth: int | None = None,
) -> Estimate:
    folders = list(folders)
    g = graphs.load(repo, folders)
    sv = survey.survey(store, g, folders)
    costed = costs.measure(store, sv, budgets)
    plan = solve.plan(costed.graph, scheme, method=method, max_depth=max_depth)
    for _ in range(SETTLE_ROUNDS):
        # The planners are heuristics: costed as if done, a plan can suggest a better one,
        # which the next repack would carry out. Settle that here, so a repack is final.
        again = costed.plan_of(
            solve.plan(costed.assuming(plan), scheme, method=method, max_depth=max_depth)
        )
        if again.chosen == plan.chosen or (again.excess(scheme), costed.settled(again)) >= (
            plan.excess(scheme),
            costed.settled(plan),
        ):
            break
        plan = again
    return Estimate(sv, costed, plan, _now(store, costed), scheme)


def _now(store: ChunkStore, costed: costs.Costed) -> Plan:
    """The plan the objects follow today (an object whose base is not planned: stored whole)."""
    chosen = []
    for v, h in enumerate(costed.nodes):
        base = store.chain_of(h)[0]
        src = costed.index.get(base, ROOT) if base is not None else ROOT
        edges = costed.graph.into(v)
        chosen.append(next((e for e in edges if e.src == src), edges[0]))
    return Plan(costed.graph, chosen)
