"""What a request to ``alignir serve`` may ask for: query length, k, items per request and body
size, each with a one-line error (400, or 413 for the body), and the body-size guard that
refuses an oversized body before reading it (ASGI middleware)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from alignir.errors import BodyTooLargeError, InvalidInputError


@dataclass(frozen=True)
class Limits:
    """The caps of one server (``alignir serve --max-...``)."""

    #: characters of one query
    max_query_chars: int = 2048
    #: hits per query
    max_k: int = 1000
    #: queries of a batch_search, allowed ids of a search, documents or ids of an admin request
    max_items: int = 256
    #: bytes of a request body
    max_body_bytes: int = 1 << 20

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def check_queries(self, queries: Sequence[Any]) -> list[str]:
        """The queries of a request, each a non-empty string of at most ``max_query_chars``
        characters without NUL, at most ``max_items`` of them."""
        if not isinstance(queries, (list, tuple)) or not queries:
            raise InvalidInputError("queries must be a non-empty list of strings")
        self.check_count(len(queries), "queries")
        for i, q in enumerate(queries):
            self.check_text(q, f"queries[{i}]" if len(queries) > 1 else "the query", self.max_query_chars)
            if not q.strip():
                raise InvalidInputError(f"{'queries[%d]' % i if len(queries) > 1 else 'the query'} is empty: "
                                        f"nothing to search for")
        return list(queries)

    def check_k(self, k: Any) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        if k > self.max_k:
            raise InvalidInputError(f"k must be at most {self.max_k} on this server, got {k}")
        return k

    def check_count(self, n: int, what: str) -> None:
        if n > self.max_items:
            raise InvalidInputError(f"at most {self.max_items} {what} per request on this server, got {n}")

    def check_ids(self, ids: Iterable[Any] | None, what: str = "ids") -> list[str] | None:
        """Document ids: strings without NUL, at most ``max_items``. They are looked up in the
        index's id table only; an id never becomes a path."""
        if ids is None:
            return None
        ids = list(ids)
        self.check_count(len(ids), what)
        for i, d in enumerate(ids):
            self.check_text(d, f"{what}[{i}]", self.max_query_chars)
        return ids

    @staticmethod
    def check_text(text: Any, what: str, max_chars: int | None = None) -> str:
        if not isinstance(text, str):
            raise InvalidInputError(f"{what} must be a string, got {type(text).__name__}")
        if "\x00" in text:
            raise InvalidInputError(f"{what} contains a NUL character")
        if max_chars is not None and len(text) > max_chars:
            raise InvalidInputError(f"{what} is {len(text)} characters long; at most {max_chars} on this server")
        return text


class BodyLimit:
    """ASGI middleware: a request whose Content-Length is over ``max_bytes`` is answered 413
    before its body is read; a body without a length (chunked) is counted as it arrives and
    refused at the first byte over."""

    def __init__(self, app: Any, max_bytes: int, respond: Any) -> None:
        self.app, self.max_bytes, self.respond = app, max_bytes, respond

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = BodyTooLargeError(f"the request body is over this server's limit of {self.max_bytes} bytes")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                too_big = False
            if too_big:
                await self.respond(scope, send, error)
                return
        if length is None:  # no length given (chunked): read at most max_bytes + 1, then hand it on
            messages, seen = [], 0
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    await self.respond(scope, send, error)
                    return
                if not message.get("more_body", False):
                    break

            async def replay() -> dict:
                return messages.pop(0) if messages else await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)
