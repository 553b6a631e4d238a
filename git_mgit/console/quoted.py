"""What a server or a remote program said, made safe to print on the user's terminal.

An LFS server's error message, an S3 store's `<Message>` or git-lfs-authenticate's
last line of stderr is shown to the user as part of one line. Its text is the
server's: a control character in it would be the terminal's (an escape sequence
can move the cursor, rewrite earlier lines or set the window title), and a line
break would split git-mgit's one line. So whitespace runs become one space and
every other character that is not printable becomes `?`, as git's own
sideband does with a remote's `remote:` lines.
"""

from __future__ import annotations


def quoted(text: str, limit: int = 300) -> str:
    """`text` as one printable line of at most `limit` characters."""
    line = " ".join(text.split())[:limit]
    return "".join(c if c.isprintable() else "?" for c in line)
