"""Shared CLI plumbing: error reporting with a non-zero exit, JSON output, logging."""
from __future__ import annotations

import contextlib
import json
import logging
import sys
import warnings
from typing import Any, Iterator, Optional

import typer

from alignir.errors import AlignirError, InvalidInputError

#: --precision of the commands that run the encoder (encoders.quantize)
PRECISION_HELP = 'fp32 | int8 (int8 Linear layers on the CPU; part of the encoder fingerprint). See docs/indexing.md.'

#: --embedder-option of the commands that build an index
EMBEDDER_OPTION_HELP = 'KEY=VALUE option of the embedder family, repeatable (e.g. K=8 for gircse); stored with the index. See docs/models.md.'

#: options the commands set from their own flags: --embedder-option may not give them
_OWN_FLAGS = {"max_length": "--max-length", "batch_tokens": "--batch-tokens", "adapter": "--adapter",
              "instruction": "--instruction", "precision": "--precision", "progress": "(always set)",
              "lm_head_from": "--lm-head-from", "text_form": "--text-form"}

#: --lm-head-from of the commands that load a model for an index
LM_HEAD_HELP = "The model whose LM head gives the aligned tokens, for an untied embedder saved without one ('input': its input embeddings). See docs/models.md."

#: exit code for bad input / a failed operation (typer uses 2 for usage errors)
EXIT_FAILURE = 1


def parse_key_values(items: list[str], flag: str) -> dict[str, Any]:
    """``["K=8", "bidirectional=false", "prompt=plain"]`` -> {"K": 8, "bidirectional": False, "prompt": "plain"}:
    each VALUE is read as JSON when it parses (numbers, true/false, null), else kept as a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise typer.BadParameter(f"{flag} expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def renamed_flag(value: Any, old_value: Any, new: str, old: str) -> Any:
    """The value of an option whose flag was renamed (``new``), accepting the old flag (``old``,
    hidden from --help) with a one-line deprecation notice on stderr; both at once is an error."""
    if old_value is None:
        return value
    if value is not None:
        raise typer.BadParameter(f"{old} is the old name of {new}: give only {new}")
    typer.secho(f"warning: {old} is deprecated and will be removed; use {new}", err=True,
                fg=typer.colors.YELLOW)
    return old_value


def embedder_options(items: list[str]) -> dict[str, Any]:
    """The ``--embedder-option`` items as a dict; a key that has its own flag is refused, naming it."""
    opts = parse_key_values(items, "--embedder-option")
    for key in opts:
        if key in _OWN_FLAGS:
            raise typer.BadParameter(f"--embedder-option {key}=...: use {_OWN_FLAGS[key]} instead")
    return opts


#: libraries whose loggers set themselves to DEBUG at import (bm25s: "Building index from IDs ...")
_SELF_DEBUG_LOGGERS = ("bm25s",)


class _BelowLevel(logging.Filter):
    """Drops records below ``level``."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


def setup_logging(verbose: bool = False) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for name in _SELF_DEBUG_LOGGERS:  # a filter outlives the setLevel(DEBUG) of the library's import
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if isinstance(f, _BelowLevel)]:
            logger.removeFilter(f)
        logger.addFilter(_BelowLevel(level))
    from alignir.retrieval.milvus import set_client_log_level  # pymilvus itself is imported when used

    # the Milvus client's, Milvus Lite's and gRPC's tracebacks and warnings: -v only (our errors are one line)
    set_client_log_level(logging.DEBUG if verbose else logging.CRITICAL + 1)
    if not verbose:  # transformers' per-load progress bars are noise in a CLI
        # so are the libraries' deprecation notices (meant for developers, not for a CLI user)
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        else:  # transformers starts with the hub's setting when a command imports it (a bm25 one never does)
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()


def fail(message: str, code: int = EXIT_FAILURE) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors(verbose: bool = False) -> Iterator[None]:
    """Turn the errors a user can cause (:class:`alignir.errors.AlignirError`: bad files, bad
    options, a corrupt or foreign index; ``OSError``: disk full, no permission, a missing file)
    into one clear line on stderr and exit code 1. Anything else is a bug: it propagates with
    its full traceback, and so does everything under ``-v``."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except AlignirError as e:
        if verbose:
            raise
        fail(str(e))
    except OSError as e:  # disk full and friends
        if verbose:
            raise
        fail(_describe_oserror(e))


def _describe_oserror(e: OSError) -> str:
    """"No such file or directory: 'x'" — the reason, then the file when there is one."""
    reason = e.strerror or str(e)
    return f"{reason}: {e.filename!r}" if getattr(e, "filename", None) else reason


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, ensure_ascii=False, indent=1, default=_jsonable))


def _jsonable(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "__dict__"):
        return vars(o)
    return str(o)


# ---------------------------------------------------------------- search backends (search, eval)

BACKEND_OPT = typer.Option("folder", help="folder | milvus (the collection `alignir export milvus` made of it).")
URI_OPT = typer.Option(None, help="Milvus: a .db file (Milvus Lite) or http(s)://host:port. See docs/scaling.md.")
DEVICE_OPT = typer.Option("auto", help="auto | cpu | cuda (the query encoder; FAISS too with faiss-gpu).")
#: --runtime of the commands that run the encoder (encoders.onnx_runtime)
RUNTIME_OPT = typer.Option(None, "--runtime", help="auto | torch | onnx: what runs the encoder's transformer "
                           "(default auto, or $ALIGNIR_RUNTIME: ONNX Runtime fp32 on a CPU where it applies, "
                           "else torch; same vectors within float rounding). See docs/indexing.md.")
TEXT_FORM_OPT = typer.Option(None, "--text-form", help="auto | off: how the LLM reads a text; auto (default) reads "
                             "runs of capitals in sentence case, off reads the text as given (BM25 and the stored "
                             "text keep the original). Stored with the index.")
COLLECTION_OPT = typer.Option(None, help="Milvus collection (default: alignir_ + folder name + 8 hex of its path).")


def backend_options(backend: str, uri: Optional[str], collection: Optional[str]) -> dict:
    """Searcher.open keywords of the --backend / --uri / --collection options (checked)."""
    from alignir.retrieval.searcher import BACKENDS

    if backend not in BACKENDS:
        raise InvalidInputError(f"--backend must be one of {' | '.join(BACKENDS)}, got {backend!r}")
    if backend == "folder":
        if uri is not None or collection is not None:
            raise InvalidInputError("--uri / --collection need --backend milvus")
        return {}
    if not uri:
        raise InvalidInputError("--backend milvus needs --uri (a local .db file or http(s)://host:port)")
    return {"backend": backend, "uri": uri, "collection": collection}
