"""The errors a user can cause, under one base class.

Every error alignir raises because of its input (a bad option value, a malformed corpus, a
folder that is not an index, a corrupt or foreign index, a query encoder that does not match)
is an :class:`AlignirError`. The command line turns those (and ``OSError``: disk full, no
permission) into one line and exit status 1; anything else is a bug and shows its traceback.
The subclasses keep the built-in base they had before (``ValueError`` / ``OSError``), so
existing ``except ValueError`` code keeps working.
"""
from __future__ import annotations

__all__ = ["AlignirError", "InvalidInputError"]


class AlignirError(Exception):
    """Base of every error a user can cause."""


class InvalidInputError(AlignirError, ValueError):
    """A value passed by the user (an option, a file's content, a query) is not allowed."""
