"""A tracked model file as git sees it: the manifest git stores, and the two ways
between the file's bytes and it.

- manifest: the format (DESIGN.md "Manifest"): segments, chunks, content hashes;
- clean: a file's bytes in, its chunks stored as objects, its manifest out;
- smudge: a manifest in, the file's bytes rebuilt byte-for-byte out;
- tracked: which manifests the index, a revision or any ref reaches.

The filter protocol (filters/) and the direct checkout (worktree/) call these;
none of them speaks git's protocol itself.
"""
