"""The errors a user can cause, under one base class.

Every error alignir raises because of its input (a bad option value, a malformed corpus, a
folder that is not an index, a corrupt or foreign index, a query encoder that does not match)
is an :class:`AlignirError`. The command line turns those (and ``OSError``: disk full, no
permission) into one line and exit status 1; anything else is a bug and shows its traceback.
The subclasses keep the built-in base they had before (``ValueError`` / ``OSError``), so
existing ``except ValueError`` code keeps working.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["AlignirError", "InvalidInputError", "BeirFormatError", "QrelsError"]

_MAX_SHOWN = 25


class AlignirError(Exception):
    """Base of every error a user can cause."""


class InvalidInputError(AlignirError, ValueError):
    """A value passed by the user (an option, a file's content, a query) is not allowed."""


class BeirFormatError(InvalidInputError):
    """A BEIR file is malformed. ``problems`` lists every (line, reason) found."""

    kind = "file"

    def __init__(self, path: str | Path, problems: list[tuple[int, str]]):
        self.path = str(path)
        self.problems = list(problems)
        shown = [f"  line {ln}: {why}" if ln > 0 else f"  {why}" for ln, why in self.problems[:_MAX_SHOWN]]
        more = len(self.problems) - len(shown)
        if more > 0:
            shown.append(f"  ... and {more} more")
        super().__init__(
            f"{self.path}: {len(self.problems)} problem(s) in {self.kind}:\n" + "\n".join(shown)
        )


class QrelsError(BeirFormatError):
    kind = "qrels"
