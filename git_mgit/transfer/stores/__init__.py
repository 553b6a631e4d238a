"""Where a remote's tensor objects live: one interface, three stores (docs/storage.md).

- refs.py: version refs in the remote's own git repository (bare repositories,
  file://, ssh, self-hosted servers);
- pointers.py: version refs whose trees hold small pointer files, the objects'
  bytes in a blob store beside git: lfs/ (the remote's Git LFS endpoint, Batch
  API) or s3.py (an S3-compatible bucket);
- blobs.py: the blob stores' interface (git-lfs's tq/ adapters are the model).

Planning, layout and availability (transfer/*.py) import none of these.
"""
