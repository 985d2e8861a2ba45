"""A shipped alignir model as a distillation teacher (encoders.train.teacher.AlignirTeacher): its
vectors are the dense h an index built with that model stores, normalised; its cache identity
names the adapter and the length it reads; a name that ships nothing is refused before any load."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from alignir.encoders.models import file_sha256
from alignir.encoders.shipped import adapter_dir
from alignir.encoders.train.teacher import AlignirTeacher, CachedTeacher, make_teacher
from alignir.errors import InvalidInputError

NAME = "smollm2-135m-alignir-v4"
DOCS = ["Microwave heating of ceramic plates.", "Boundary layers in HYPERSONIC FLOW past a cone."]
QUERIES = ["which ceramics heat in a microwave?"]


def test_identity_names_adapter_and_length_and_needs_no_model():
    t = make_teacher(f"alignir:{NAME}", 64)
    assert isinstance(t, AlignirTeacher) and t._embedder is None  # nothing loaded yet
    sha = file_sha256(adapter_dir(NAME) / "adapter_model.safetensors")
    assert t.identity == f"alignir:{NAME}|adapter={sha[:16]}|max_length=64"
    assert AlignirTeacher(f"alignir:{NAME}").identity.endswith("|max_length=512")
    assert make_teacher("alignir:gemma3-270m-alignir", 64).identity != t.identity
    assert t.prompt("query") == t.prompt("document") == ""


@pytest.mark.parametrize("spec, length", [("alignir:no-such-model", None), ("alignir:", None),
                                          (f"alignir:{NAME}", 0)])
def test_bad_specs_are_refused(spec, length):
    with pytest.raises(InvalidInputError):
        AlignirTeacher(spec, length)


@pytest.mark.model
def test_vectors_are_the_models_dense_leg_normalised(smollm2, tmp_path):
    from alignir import Encoder

    teacher = AlignirTeacher(f"alignir:{NAME}", 32, runtime="torch")
    enc = Encoder.from_pretrained(NAME, loaded=smollm2, max_length=32, runtime="torch")
    for role, texts, read in (("document", DOCS, enc.encode_documents), ("query", QUERIES, enc.encode_queries)):
        h = read(texts).dense
        want = h / np.linalg.norm(h, axis=1, keepdims=True)
        got = teacher.embed(texts, role)
        assert got.dtype == torch.float32 and got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    cached = CachedTeacher(teacher, tmp_path)
    first = cached.embed(DOCS, "document")
    cached.flush()
    again = CachedTeacher(AlignirTeacher(f"alignir:{NAME}", 32, runtime="torch"), tmp_path)
    np.testing.assert_array_equal(again.embed(DOCS, "document").numpy(), first.numpy())
    assert again.hits == 2 and again.misses == 0 and again.teacher._embedder is None  # read back, no model loaded
