"""Helpers the benchmark scripts share.

Result files whose rows a rerun replaces (:func:`replace_rows`): a benchmark writes its new rows in
place of the old rows with the same key and keeps every other row, in order. The encoders of
``NAME=ADAPTER`` arguments (:func:`adapter_encoders`) for the per-adapter benchmarks. The folder of
the BEIR test collections (:data:`DATASETS`). Cheap to import: numpy and torch load only when used."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
#: the shared data beside the repository ($ALIGNIR_SHARED), and its BEIR collections (adi, med, ...)
SHARED = Path(os.environ.get("ALIGNIR_SHARED", ROOT.parent / "shared"))
DATASETS = SHARED / "datasets"

RowKey = Sequence[str] | Callable[[dict], Hashable]


def _key_function(key: RowKey) -> Callable[[dict], Hashable]:
    if callable(key):
        return key
    fields = tuple(key)
    return lambda row: tuple(row.get(f) for f in fields)


def merged_rows(old: list[dict], rows: list[dict], key: RowKey) -> list[dict]:
    """``old`` without the rows whose key a row of ``rows`` has, then ``rows``."""
    of = _key_function(key)
    new_keys = {of(r) for r in rows}
    return [r for r in old if of(r) not in new_keys] + list(rows)


def replace_rows(path: str | Path, rows: list[dict], key: RowKey, wrapped: bool = False) -> list[dict]:
    """Merge ``rows`` into the results file ``path`` (:func:`merged_rows`) and write it
    atomically: a bare JSON list, or ``{"rows": [...]}`` when ``wrapped``. Returns the rows written."""
    from alignir.io import atomic_write_json

    path = Path(path)
    old: Any = json.loads(path.read_text()) if path.exists() else ({"rows": []} if wrapped else [])
    if wrapped != isinstance(old, dict):
        raise ValueError(f"{path} holds a {type(old).__name__}, expected {'an object' if wrapped else 'a list'}")
    merged = merged_rows(old["rows"] if wrapped else old, rows, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"rows": merged} if wrapped else merged, indent=1, ensure_ascii=False)
    return merged


def adapter_encoders(specs: Sequence[str], model: str, **options: Any) -> Iterator[tuple[str, str, Any]]:
    """(name, adapter as given, ``alignir.Encoder``) for each ``NAME=ADAPTER`` (a folder or
    ``builtin:NAME``), an InfoNCE adapter of ``model``, loaded one at a time."""
    from alignir import Encoder
    from alignir.encoders.shipped import resolve_adapter

    for spec in specs:
        name, _, adapter = spec.partition("=")
        yield name, adapter, Encoder.from_pretrained(model, adapter=resolve_adapter(adapter), family="infonce",
                                                     **options)
