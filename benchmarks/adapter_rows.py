"""Shared by the per-adapter benchmarks (aligned_token_spread.py, loss_gradients.py): the encoders
of ``NAME=ADAPTER`` arguments, and result rows that replace those with the same key."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence


def adapter_encoders(specs: Sequence[str], model: str, **options: Any) -> Iterator[tuple[str, str, Any]]:
    """(name, adapter as given, ``alignir.Encoder``) for each ``NAME=ADAPTER`` (a folder or
    ``builtin:NAME``), an InfoNCE adapter of ``model``, loaded one at a time."""
    from alignir import Encoder
    from alignir.encoders.shipped import resolve_adapter

    for spec in specs:
        name, _, adapter = spec.partition("=")
        yield name, adapter, Encoder.from_pretrained(model, adapter=resolve_adapter(adapter), family="infonce",
                                                     **options)


def replace_rows(path: Path, rows: list[dict], key: Sequence[str]) -> None:
    """Write ``{"rows": [...]}`` to ``path``: the old rows whose ``key`` fields match no new row, then ``rows``."""
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    keys = {tuple(r[k] for k in key) for r in rows}
    kept = [r for r in old if tuple(r[k] for k in key) not in keys]
    path.write_text(json.dumps({"rows": kept + rows}, indent=1, ensure_ascii=False) + "\n")
