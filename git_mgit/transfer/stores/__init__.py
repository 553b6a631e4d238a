"""Where a remote's tensor objects live: one interface, three stores (docs/storage.md).

- base.py: what every store does (publish a push's version refs and objects);
- choice.py: which store a remote uses, and why; registry.py: its code, imported lazily;
- refs.py: version refs in the remote's own git repository (bare repositories,
  file://, ssh, self-hosted servers); gitpush.py: pushing git-mgit's own refs;
- pointers.py, pointer.py: version refs whose trees hold small pointer files, the
  objects' bytes in a blob store beside git: lfs/ (the remote's Git LFS endpoint,
  Batch API) or s3/ (an S3-compatible bucket);
- blobs.py: the blob stores' interface (git-lfs's tq/ adapters are the model);
- migrate.py: `git mgit store migrate`.

Planning, layout and availability (transfer/*.py) import none of these.
"""
