"""Model selection by model hopper parallelism (Cerebro, paper 003): `git mgit select`.

Modules: `space` (SPACE.toml: the functions and the search space),
`schedule` (the randomized and fixed MOP schedulers, no processes),
`hyperband` (its brackets and the cuts at rung ends, no processes), `unit`
(one sub-epoch of one configuration on one partition), `hop` (a
configuration's state between units), `worker` (a worker process),
`driver` (the store, the workers, the epochs and the commits), `recorded`
(a run's schedule read back for replay), `report` (table, PNG, JSON).
See docs/selection.md.
"""
