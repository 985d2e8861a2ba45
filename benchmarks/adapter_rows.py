"""Shared by the per-adapter benchmarks (aligned_token_spread.py, loss_gradients.py): the encoders
of ``NAME=ADAPTER`` arguments."""
from __future__ import annotations

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
