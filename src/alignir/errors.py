"""The errors a user can cause, under one base class.

Every error alignir raises because of its input (a bad option value, a malformed corpus, a
folder that is not an index, a corrupt or foreign index, a query encoder that does not match)
is an :class:`AlignirError`. The command line turns those (and ``OSError``: disk full, no
permission) into one line and exit status 1; anything else is a bug and shows its traceback.
The subclasses keep the built-in base they had before (``ValueError`` / ``OSError``), so
existing ``except ValueError`` code keeps working.

Every error class lives here, so that ``index/``, ``encoders/`` and ``retrieval/`` raise them
without importing each other, and a user catches them from one module (or as ``alignir.X``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["AlignirError", "InvalidInputError", "BeirFormatError", "DownloadError", "CorpusError", "QueriesError",
           "QrelsError", "ModelNotFoundError", "CorpusOverlapError", "IndexStoreError", "NotAnIndexError", "CorruptIndexError",
           "UnsupportedFormatError", "FingerprintMismatch", "PrecisionMismatch", "IndexWriteError", "IndexReadError",
           "IndexChangedError", "IndexBusyError", "MilvusError", "CollectionMismatch", "IncompleteCollection",
           "LegNotServedError", "RayEncodeError", "DocumentNotFoundError", "UnauthorizedError", "BodyTooLargeError", "NotReadyError"]

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


class DownloadError(InvalidInputError):
    """A BEIR download failed (HTTP error, offline, truncated, corrupt or unsafe archive)."""


class CorpusError(BeirFormatError):
    kind = "corpus"


class QueriesError(BeirFormatError):
    kind = "queries"


class QrelsError(BeirFormatError):
    kind = "qrels"


class ModelNotFoundError(InvalidInputError):
    """A model spec could not be resolved; the message lists everything that was tried."""


class CorpusOverlapError(InvalidInputError):
    """A training corpus contains sentences of an evaluation collection; ``overlaps`` lists every
    (record id, collection, sentence) found."""

    def __init__(self, source: str, overlaps: list[tuple[str, str, str]]):
        self.source = source
        self.overlaps = list(overlaps)
        shown = [f"  {rec}: {col}: {sent[:120]!r}" for rec, col, sent in self.overlaps[:_MAX_SHOWN]]
        more = len(self.overlaps) - len(shown)
        if more > 0:
            shown.append(f"  ... and {more} more")
        super().__init__(f"{source}: {len(self.overlaps)} record(s) contain text of an evaluation collection; "
                         "refusing to write the corpus:\n" + "\n".join(shown))


# ---------------------------------------------------------------- the index folder


class IndexStoreError(AlignirError):
    """Base class of the index-directory errors."""


class NotAnIndexError(IndexStoreError, ValueError):
    """The path does not exist, or is not an alignir index folder."""


class CorruptIndexError(IndexStoreError, ValueError):
    """A file is missing, altered (checksum) or inconsistent with the manifest."""


class UnsupportedFormatError(IndexStoreError, ValueError):
    """The index was written by a newer alignir (format version too high)."""


class FingerprintMismatch(IndexStoreError, ValueError):
    """The query encoder differs from the encoder that built the index."""

    def __init__(self, differences: dict[str, tuple[Any, Any]]):
        self.differences = differences
        lines = [f"  {k}: index={a!r}, query encoder={b!r}" for k, a, b in
                 ((k, *v) for k, v in sorted(differences.items()))]
        super().__init__("the query encoder does not match the encoder that built this index "
                         "(queries must be encoded the same way as the documents); differing "
                         "fields:\n" + "\n".join(lines))


class PrecisionMismatch(FingerprintMismatch):
    """The query encoder runs at another precision (fp32 | int8) than the index's encoder."""

    def __init__(self, index_precision: str, query_precision: str):
        super().__init__({"model.precision": (index_precision, query_precision)})
        self.args = (f"this index was built by a {index_precision} encoder but the query encoder is "
                     f"{query_precision}: search with --precision {index_precision} (Searcher.open("
                     f"precision={index_precision!r})), or pass --allow-precision-mismatch "
                     f"(allow_precision_mismatch=True) to accept slightly different query vectors",)


class IndexWriteError(IndexStoreError, OSError):
    """Writing the index failed (disk full, permissions...); nothing was changed."""


class IndexReadError(IndexStoreError, OSError):
    """An index file could not be read (permissions, I/O error)."""


class IndexChangedError(IndexStoreError):
    """The index changed between a writer's read and its swap (another writer got there first)."""


class IndexBusyError(AlignirError):
    """Another process is writing this index."""


# ---------------------------------------------------------------- Milvus


class MilvusError(AlignirError):
    """Milvus could not be reached or refused an operation (one line, with the URI)."""


class CollectionMismatch(AlignirError, ValueError):
    """The collection was exported from another index (or by another encoder)."""


class IncompleteCollection(MilvusError):
    """The collection is not whole: an interrupted export, or storage that lost rows."""


# ---------------------------------------------------------------- Ray


class RayEncodeError(AlignirError):
    """Encoding on Ray cannot go on: ray is not installed, the cluster cannot be reached, its
    actors cannot load the encoder, or every actor is gone (one line)."""


# ---------------------------------------------------------------- search backends


class LegNotServedError(InvalidInputError):
    """A search backend cannot search one of the searcher's legs (e.g. a registered custom leg
    on Milvus, which holds only the exported dense, sparse and bm25 fields). Raised when the
    searcher is opened on that backend, before any query."""

    def __init__(self, leg: str, backend: str, served: tuple[str, ...] = ()):
        self.leg, self.backend, self.served = leg, backend, tuple(served)
        serves = f" (it serves {', '.join(self.served)})" if self.served else ""
        super().__init__(f"the {backend} backend cannot search the leg {leg!r}{serves}: search it on the folder "
                         f"backend, or open the searcher without that leg (retrieval.legs.unregister_leg, or "
                         f"Searcher(..., legs=...) then MilvusSearcher.from_searcher)")


# ---------------------------------------------------------------- serving (alignir serve)


class DocumentNotFoundError(InvalidInputError):
    """No document with this id in the index (HTTP 404 from ``alignir serve``)."""


class UnauthorizedError(AlignirError):
    """An admin request without the server's admin token (HTTP 401)."""


class BodyTooLargeError(InvalidInputError):
    """A request body over the server's size limit (HTTP 413), refused before it is read whole."""


class NotReadyError(AlignirError):
    """The server cannot answer yet: its query encoder is loading, or its index could not be
    opened (HTTP 503)."""
