"""``--ray`` / ``ray=``: the encoding of ``build_index`` and ``alignir encode`` on a Ray cluster.

The process that builds keeps its own encoder (it fits u1, projects onto the vocabulary, writes
the index); only the dense encoding of uncached texts goes to the actors of an
``encoders.ray_pool.RayEncodePool``, whose vectors the embedding cache stores as it would this
process's (same fingerprint, checked).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from alignir.errors import InvalidInputError

__all__ = ["ray_pool"]


@contextlib.contextmanager
def ray_pool(embedder: Any, ray: Any, *, model: str, family: str, options: dict[str, Any], device: str = "auto",
             runtime: str | None = None, use_cache: bool = True,
             stage: Callable[[str], None] = lambda s: None) -> Iterator[Any]:
    """A ``RayEncodePool`` whose actors build the encoder ``embedder`` is (``model``, ``family``,
    ``options``, its dtype, ``runtime``), or None when ``ray`` is None. ``ray``: an address
    ("auto", "local", HOST:PORT) or ``RayOptions``. The actors stop when the block ends."""
    if ray is None or embedder is None:
        yield None
        return
    if not use_cache:
        raise InvalidInputError("encoding on Ray writes through the embedding cache: leave --resume on")
    from alignir.encoders.cache import dense_fingerprint, fingerprint_key
    from alignir.encoders.ray_pool import EncoderRecipe, RayEncodePool, RayOptions

    opts = RayOptions.of(ray)
    dtype = str(getattr(getattr(embedder, "loaded", None), "dtype", "") or "").replace("torch.", "") or None
    recipe = EncoderRecipe(model=model, family=family, options=dict(options), dtype=dtype, runtime=runtime)
    stage(f"starting the Ray encoders ({opts.address})")
    with RayEncodePool(recipe, opts, expected_key=fingerprint_key(dense_fingerprint(embedder)),
                       device=device) as pool:
        stage(f"encoding on Ray: {len(pool.actors)} actors on {pool.device} (cluster {pool.resources})")
        yield pool
