"""The Hugging Face Hub's published rules for what git may carry, as a pre-receive hook.

The Hub refuses a push with a git file over 10 MiB, or a binary file over
1 MB, outside LFS (DESIGN.md, "Where objects live on the remote"). This
hook applies both to every blob a push brings (`git rev-list --objects`
of the new tips, minus what the repository already has), with the Hub's own
wording, so a test sees exactly what a user would.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_FILE = 10 * 1024 * 1024  # any git file
MAX_BINARY = 1000 * 1000  # a binary one
_SNIFF = 8000  # git's own binary test looks for a NUL in the first 8000 bytes

HOOK = f"""#!{sys.executable}
import subprocess, sys

MAX_FILE, MAX_BINARY, SNIFF = {MAX_FILE}, {MAX_BINARY}, {_SNIFF}
ZERO = "0" * 40
tips = [line.split()[1] for line in sys.stdin.read().splitlines() if line.split()[1] != ZERO]
if not tips:
    sys.exit(0)
listing = subprocess.run(
    ["git", "rev-list", "--objects", "--stdin", "--not", "--all"],
    input="\\n".join(tips) + "\\n", capture_output=True, text=True, check=True,
).stdout
oids = [line.split()[0] for line in listing.splitlines() if line]
info = subprocess.run(
    ["git", "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"],
    input="\\n".join(oids) + "\\n", capture_output=True, text=True, check=True,
).stdout
large, binary = [], []
for line in info.splitlines():
    oid, kind, size = line.split()
    if kind != "blob" or int(size) <= MAX_BINARY:
        continue
    if int(size) > MAX_FILE:
        large.append(oid)
        continue
    head = subprocess.run(["git", "cat-file", "blob", oid], capture_output=True).stdout[:SNIFF]
    if b"\\0" in head:
        binary.append(oid)
if large:
    print("Your push was rejected because it contains files larger than 10 MiB.")
    print("Please use https://git-lfs.github.com/ to store large files.")
    print("Offending blobs: " + ", ".join(large[:3]))
    sys.exit(1)
if binary:
    print("Your push was rejected because it contains binary files.")
    print("Please use https://huggingface.co/docs/hub/xet to store binary files.")
    print("Offending blobs: " + ", ".join(binary[:3]))
    sys.exit(1)
"""


def enforce_hub_rules(bare: Path) -> None:
    """Install the hook in the bare repository at `bare`."""
    hook = bare / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(HOOK)
    hook.chmod(0o755)
