"""Transfer: what a clone, fetch, pull and push move, and how.

Layers, lowest first:

- versions.py: the version refs' names (refs/mgit/v/<version>[.<base>...]) and
  the closure of a version along its bases;
- remotes.py: which remote, what it lists (one `git ls-remote`);
- notes.py: lineage notes travel with every fetch and push;
- history.py: the model versions in commits (pushed, recent, reachable);
- fetch.py: on-demand fetch of the versions a checkout or command needs;
- layout.py: how a push lays versions out (tips whole, the others as `git add`
  stored them where their chains fit the fetch budget), planned before writing;
- publish.py: writes the planned objects and version refs locally;
- push.py: sends them under mgit.maxPushSize, then the notes (pre-push);
- prefetch.py and prune.py: `git mgit fetch --recent/--all/--rev`, `git mgit prune`.

The filter reaches this package through fetch.fetch_versions only.
"""
