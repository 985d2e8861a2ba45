"""``alignir serve``: the search service over HTTP (retrieval/server/, the ``[serve]`` extra)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from alignir.errors import InvalidInputError
from alignir.retrieval.commands.common import (BACKEND_OPT, COLLECTION_OPT, DEVICE_OPT, RUNTIME_OPT, URI_OPT,
                                              backend_options, setup_logging, user_errors)

#: the environment variable that turns the admin endpoints on, as --admin-token does
ADMIN_TOKEN_ENV = "ALIGNIR_ADMIN_TOKEN"


def serve_cmd(
    index: Path = typer.Option(..., "--index", "-i", help="Index folder."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback unless told otherwise)."),
    port: int = typer.Option(8000, help="Port (0: a free one; the line printed at start names it)."),
    admin_token: Optional[str] = typer.Option(None, "--admin-token", help="Turn on POST/DELETE /documents for "
                                              "requests with 'Authorization: Bearer TOKEN' (or set "
                                              f"${ADMIN_TOKEN_ENV}). Off by default."),
    cors: Optional[str] = typer.Option(None, "--cors", help="The one browser origin allowed to call the API "
                                       "(e.g. https://app.example.org). Off by default."),
    max_batch_encode: int = typer.Option(32, "--max-batch-encode", help="Queries encoded in one model pass "
                                         "across concurrent requests (1: no micro-batching)."),
    max_wait_ms: float = typer.Option(2.0, "--max-wait-ms", help="How long the first query of a pass waits "
                                      "for others."),
    max_query_chars: int = typer.Option(2048, help="Characters of one query."),
    max_k: int = typer.Option(1000, help="Hits per query."),
    max_items: int = typer.Option(256, help="Queries, allowed ids, documents or ids per request."),
    max_body_bytes: int = typer.Option(1 << 20, help="Bytes of a request body (refused with 413 before it is read)."),
    backend: str = BACKEND_OPT,
    uri: Optional[str] = URI_OPT,
    collection: Optional[str] = COLLECTION_OPT,
    device: str = DEVICE_OPT,
    runtime: Optional[str] = RUNTIME_OPT,
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Serve an index over HTTP: JSON search API, OpenAPI at /docs, and a page at / that shows
    why each hit matched. One model and one searcher per process; concurrent queries are
    encoded together; a swapped index (alignir add, delete, resparsify, build-index) is picked
    up without a restart. With --backend milvus the legs are searched in the collection `alignir
    export milvus` made of the folder (the folder still encodes the queries). See docs/serving.md."""
    setup_logging(verbose)
    with user_errors(verbose):
        try:
            from alignir.retrieval.server import build_app
            from alignir.retrieval.server.run import bind, serve
        except ImportError as e:
            raise InvalidInputError(f"alignir serve needs the serve extra: pip install 'alignir[serve]' ({e})") from None
        if max_batch_encode < 1 or max_wait_ms < 0:
            raise InvalidInputError("--max-batch-encode must be at least 1 and --max-wait-ms at least 0")
        token = admin_token or os.environ.get(ADMIN_TOKEN_ENV) or None
        app = build_app(index, admin_token=token, cors=cors, max_batch=max_batch_encode,
                        max_wait=max_wait_ms / 1000.0, device=device, runtime=runtime,
                        **backend_options(backend, uri, collection),
                        limits=dict(max_query_chars=max_query_chars, max_k=max_k, max_items=max_items,
                                    max_body_bytes=max_body_bytes))
        serve(app, bind(host, port), log_level="info" if verbose else "warning")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
