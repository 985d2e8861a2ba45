"""The aligned-token weightings (“A Text is Worth Several Tokens” eq.15-16), defined once: the
allowed values of ``encoders.aligned.doc_vectors`` / ``query_vectors`` and of
``retrieval.config.SparseConfig``. Torch-free, so a configuration can be validated without
loading the model code.

* documents (eq.15): ``raw`` logit e_tᵀh, ``relu`` of it, ``log1p`` of the relu;
* queries (eq.16): ``binary`` (the paper: every token 1) or the same logit-derived weights for
  the aligned part (surface tokens keep weight 1).
"""
from __future__ import annotations

DOC_WEIGHTINGS = ("raw", "relu", "log1p")
QUERY_WEIGHTINGS = ("binary", "raw", "relu", "log1p")
