"""Query errors that point at the offending token.

Every error raised while parsing, checking or running a query carries the
position of the token it is about; once the query text is attached, the
message shows that line with a caret under the token:

    query error at line 1, column 24: expected a comparison (=, !=, <, like, in, ...), got "foo"
      select m where m.name foo "x"
                            ^^^
"""

from __future__ import annotations

from dataclasses import dataclass

from git_mgit.errors import MgitError


@dataclass(frozen=True)
class Pos:
    """Where a token is: 1-based line and column, and how many characters it spans."""

    line: int
    column: int
    width: int = 1


class QueryError(MgitError):
    """A query that does not parse, does not make sense, or cannot run; `pos` says where."""

    def __init__(self, message: str, pos: Pos | None = None, text: str | None = None) -> None:
        super().__init__(message)
        self.message, self.pos, self.text = message, pos, text

    def within(self, text: str) -> QueryError:
        """This error, shown against the query `text` (the first text attached wins)."""
        return self if self.text is not None else QueryError(self.message, self.pos, text)

    def __str__(self) -> str:
        if self.pos is None or self.text is None:
            return f"query error: {self.message}"
        lines = self.text.splitlines() or [""]
        line = lines[min(self.pos.line, len(lines)) - 1].replace("\t", " ")
        caret = " " * (self.pos.column - 1) + "^" * max(1, self.pos.width)
        return (
            f"query error at line {self.pos.line}, column {self.pos.column}: {self.message}\n"
            f"  {line}\n  {caret}"
        )
