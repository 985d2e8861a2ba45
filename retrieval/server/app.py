"""The HTTP face of :class:`~alignir.retrieval.server.service.Service`: a FastAPI app with the
Python API's names and defaults, one-line JSON errors with their status, the body-size guard,
CORS only when asked for, the admin routes only with a token, and the page at ``/``."""
from __future__ import annotations

import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from starlette.exceptions import HTTPException as StarletteHTTPException

from alignir.errors import (AlignirError, BodyTooLargeError, DocumentNotFoundError, IndexBusyError,
                            IndexChangedError, IndexStoreError, InvalidInputError, NotReadyError,
                            UnauthorizedError)
from alignir.retrieval.server.limits import BodyLimit
from alignir.retrieval.server.page import render_page
from alignir.retrieval.server.service import Service

log = logging.getLogger(__name__)
STATIC = Path(__file__).with_name("static")
VERSION_HEADER = "X-Alignir-Index-Version"

#: error class -> HTTP status, most specific first
STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (UnauthorizedError, 401), (DocumentNotFoundError, 404), (BodyTooLargeError, 413),
    (NotReadyError, 503), (IndexBusyError, 409), (IndexChangedError, 409),
    (InvalidInputError, 400), (IndexStoreError, 503), (AlignirError, 400),
)


def status_of(e: BaseException) -> int:
    return next((code for cls, code in STATUS if isinstance(e, cls)), 500)


def error_body(e: BaseException | str, status: int) -> dict[str, Any]:
    message = e if isinstance(e, str) else (" ".join(str(e).split()) or type(e).__name__)
    kind = "HTTPError" if isinstance(e, str) else type(e).__name__
    return {"error": message, "type": kind, "status": status}


async def _respond(scope: dict, send: Any, error: BaseException) -> None:
    """Send an error response from ASGI middleware (the body is never read)."""
    status = status_of(error)

    async def no_body() -> dict:
        return {"type": "http.disconnect"}

    await JSONResponse(error_body(error, status), status_code=status,
                       headers={"Connection": "close"})(scope, no_body, send)


class SearchOptions(BaseModel):
    """The options of ``Searcher.batch_search`` (same names, same defaults), plus ``text``: attach
    each hit's stored title and text (an index built with --store-text)."""

    model_config = ConfigDict(extra="forbid")
    # strict: k=true or k="10" in a JSON body is a 400, not k=1 or 10
    k: StrictInt = 10
    mode: str = "hybrid"
    explain: StrictBool = False
    fusion: Optional[str] = None
    alpha: Optional[StrictFloat] = None
    weights: Optional[dict[str, StrictFloat]] = None
    depth: Optional[StrictInt] = None
    allowed_ids: Optional[list[str]] = None
    passage_agg: Optional[str] = None
    text: StrictBool = False


class SearchBody(SearchOptions):
    """One query: ``q`` (or ``query``, ``Searcher.search``'s name)."""

    q: str = Field(validation_alias=AliasChoices("q", "query"))


class BatchBody(SearchOptions):
    queries: list[str]


class AddBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[dict[str, Any]]
    replace: StrictBool = False


class DeleteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str]


def create_app(service: Service, *, cors: str | None = None, load_model: bool = True) -> FastAPI:
    """The app serving ``service``. ``cors``: the one origin allowed to call it from a browser
    (None: no CORS headers at all). ``load_model``: load the query encoder in the background at
    start (``/readyz`` says when it is done; BM25 searches are answered meanwhile)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        if load_model:
            threading.Thread(target=_load, args=(service,), name="alignir-load", daemon=True).start()
        yield
        service.stop()

    app = FastAPI(title="alignir", summary="Sparse/dense hybrid search whose hits explain themselves",
                  lifespan=lifespan)
    app.state.service = service
    _errors(app)
    if cors:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=[cors], allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type"])
    app.add_middleware(BodyLimit, max_bytes=service.limits.max_body_bytes, respond=_respond)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def versioned(body: dict[str, Any]) -> JSONResponse:
        return JSONResponse(body, headers={VERSION_HEADER: body["index_version"]})

    def one(q: str, options: SearchOptions) -> JSONResponse:
        body = service.search([q], **options.model_dump())
        result = body.pop("results")[0]
        return versioned({**body, **result})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(render_page(service.info()))

    @app.get("/search", summary="Top-k hits of one query (Searcher.search)")
    def search_get(q: str, k: int = 10, mode: str = "hybrid", explain: bool = False,
                   fusion: Optional[str] = None, alpha: Optional[float] = None, depth: Optional[int] = None,
                   allowed_ids: Annotated[Optional[list[str]], Query()] = None, passage_agg: Optional[str] = None,
                   text: bool = False) -> JSONResponse:
        return one(q, SearchOptions(k=k, mode=mode, explain=explain, fusion=fusion, alpha=alpha, depth=depth,
                                    allowed_ids=allowed_ids, passage_agg=passage_agg, text=text))

    @app.post("/search", summary="Top-k hits of one query (Searcher.search)")
    def search_post(body: SearchBody) -> JSONResponse:
        return one(body.q, SearchOptions(**body.model_dump(exclude={"q"})))

    @app.post("/batch_search", summary="Top-k hits of each query (Searcher.batch_search)")
    def batch_search(body: BatchBody) -> JSONResponse:
        return versioned(service.search(body.queries, **body.model_dump(exclude={"queries"})))

    @app.get("/doc/{doc_id:path}", summary="A stored document (an index built with --store-text)")
    def doc(doc_id: str) -> JSONResponse:
        return versioned(service.doc(doc_id))

    @app.get("/info", summary="The index, its legs and modes, the server's limits")
    def info() -> JSONResponse:
        return versioned(service.info())

    @app.get("/healthz", summary="Liveness: the process answers")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Readiness: the index open and the query encoder loaded")
    def readyz() -> JSONResponse:
        ok, why = service.ready()
        return JSONResponse({"ready": ok, "status": why}, status_code=200 if ok else 503)

    if service.admin_token is not None:
        @app.post("/documents", summary="Add documents (admin; alignir add)")
        def add(body: AddBody, authorization: Optional[str] = Header(None)) -> JSONResponse:
            service.check_token(authorization)
            return versioned(service.add(body.documents, body.replace))

        @app.delete("/documents", summary="Delete documents (admin; alignir delete)")
        def delete(body: DeleteBody, authorization: Optional[str] = Header(None)) -> JSONResponse:
            service.check_token(authorization)
            return versioned(service.delete(body.ids))

    return app


def _load(service: Service) -> None:
    try:
        service.load_model()
    except Exception:  # noqa: BLE001 - /readyz keeps saying not ready; the log has why
        log.exception("the query encoder could not be loaded")


def _errors(app: FastAPI) -> None:
    """Every error as one JSON line with its status; a traceback only in the server's log."""

    @app.exception_handler(AlignirError)
    async def alignir_error(request: Request, e: AlignirError) -> JSONResponse:
        status = status_of(e)
        return JSONResponse(error_body(e, status), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request")
        return JSONResponse(error_body(InvalidInputError(message), 400), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(e.detail), e.status_code), status_code=e.status_code,
                            headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def bug(request: Request, e: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=e)
        return JSONResponse(error_body(f"internal error ({type(e).__name__}); the server log has the details",
                                       500), status_code=500)
