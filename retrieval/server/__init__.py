"""``alignir serve``: an index as an HTTP search service (FastAPI on uvicorn, the ``[serve]`` extra).

- :mod:`.state`: the open index, followed through its atomic swaps, one model for all versions;
- :mod:`.batcher`: dynamic micro-batching of the query encodes;
- :mod:`.limits`: what a request may ask for, and the body-size guard;
- :mod:`.service`: what each request does; :mod:`.app`: the HTTP routes and errors;
- :mod:`.page`: the page at ``/`` (static/: its script and style, no CDN);
- :mod:`.run`: binding and running under uvicorn (SIGTERM drains).

    >>> from alignir.retrieval.server import build_app
    >>> app = build_app("indexes/adi")          # an ASGI app: uvicorn, or alignir serve
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

__all__ = ["build_app"]


def build_app(index: str | Path, *, admin_token: str | None = None, cors: str | None = None,
              max_batch: int = 32, max_wait: float = 0.002, limits: Mapping[str, int] | None = None,
              load_model: bool = True, **open_options: Any) -> Any:
    """The FastAPI app serving the index folder ``index``; ``open_options`` go to
    ``Searcher.open`` (device, runtime, model, loaded...). The index opens now (its model loads
    when the app starts, in the background: ``/readyz``)."""
    from alignir.retrieval.server.app import create_app
    from alignir.retrieval.server.limits import Limits
    from alignir.retrieval.server.service import Service
    from alignir.retrieval.server.state import IndexHolder

    options = {k: v for k, v in open_options.items() if v is not None}
    if options.get("backend", "folder") != "folder" and admin_token is not None:
        from alignir.errors import InvalidInputError

        raise InvalidInputError("the admin endpoints write the index folder, not the Milvus collection served: "
                                "serve the folder to write it, then export it again (alignir export milvus)")
    holder = IndexHolder(index, options)
    holder.open()  # a missing or broken index is an error here, before anything listens
    service = Service(holder, limits=Limits(**dict(limits or {})), max_batch=max_batch,
                      max_wait=max_wait, admin_token=admin_token)
    return create_app(service, cors=cors, load_model=load_model)
