"""Writing model files into the working tree without git's in-memory buffer.

git holds every smudge output whole in memory before it writes the file, so
a model larger than RAM cannot check out through the filter. For files of at
least mgit.directSize the filter hands git an empty file and writes the real
bytes into it itself, straight from the object store, once git has written
it; at git's exit it records the written files' stat data in the index so
that git never re-reads them (docs/storage.md, "Checking out large models").

- journal: which direct writes are in flight or done (<git-dir>/mgit/direct/)
- write: stream one manifest into one file, pre-sized, in place
- staging: a fetch's large files decoded as their objects arrive, beside the
  download, then renamed over git's empty files
- gitindex: patch stat data of index entries in place
- session: the filter's side, across the requests of one git command
- repair: `git mgit checkout`, which (re)writes model files directly
- checkedout: the other way round, a checked-out version's chunks read back
  from its file (verified) for a push to encode, instead of decoding them
"""
