"""The backbone exported to ONNX and run by ONNX Runtime (encoders.onnx_runtime): fp32 vectors
equal torch's, the export is cached by the encoder's model and reused, int8 keeps the
down-projections fp32 and says so in the fingerprint."""
from __future__ import annotations


import numpy as np
import pytest
from conftest import TINY_CORPUS, needs_onnx

from alignir.encoders.embedders import get_embedder
from alignir.encoders import onnx_runtime
from alignir.encoders.onnx_runtime import backbone_files, check_runtime, model_key, to_onnx
from alignir.errors import InvalidInputError

pytestmark = [pytest.mark.usefixtures("one_thread"), needs_onnx()]

#: lengths from one token to a long sentence, so batches pad
TEXTS = TINY_CORPUS + ["x", "retrieval", "", " ".join(TINY_CORPUS[:3])]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


@pytest.mark.parametrize("which", ["tiny_model", "tiny_model_bos"])
def test_onnx_fp32_vectors_equal_torch(request, root, which):
    model = request.getfixturevalue(which)
    ref = get_embedder("prompteol", model, progress=False, max_batch_size=3, instruction="scifact")
    emb = to_onnx(get_embedder("prompteol", model, progress=False, max_batch_size=3, instruction="scifact"),
                  quantize=False, root=root)
    for role in ("document", "query"):
        want, got = ref._encode(TEXTS, role), emb._encode(TEXTS, role)
        assert emb.last_stats["n_batches"] > 1
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.array_equal(got[TEXTS.index("")], np.zeros(emb.dim, np.float32))
    assert emb.fingerprint() == ref.fingerprint()  # equal vectors: the same encoder


def test_export_is_cached_and_reused(tiny_model, root, monkeypatch):
    first = get_embedder("prompteol", tiny_model, progress=False)
    path, made = backbone_files(first, first._backbone, quantize=False, root=root)
    stamp = path.stat().st_mtime_ns

    def no_export(*a, **k):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_runtime, "_export", no_export)
    other = get_embedder("prompteol", tiny_model, progress=False, max_length=64, instruction="med")
    assert model_key(other) == model_key(first)  # template and lengths are not in the graph
    again, made_again = backbone_files(other, other._backbone, quantize=False, root=root)
    assert (again, made_again) == (path, False) and again.stat().st_mtime_ns == stamp
    np.testing.assert_allclose(to_onnx(other, quantize=False, root=root).encode_documents(TINY_CORPUS),
                               get_embedder("prompteol", tiny_model, progress=False, max_length=64,
                                            instruction="med").encode_documents(TINY_CORPUS), rtol=1e-4, atol=1e-4)


def test_another_model_gets_another_file(tiny_model, tiny_model_bos):
    assert model_key(get_embedder("prompteol", tiny_model)) != model_key(get_embedder("prompteol", tiny_model_bos))


def test_a_moved_copy_of_the_same_weights_reuses_the_export(tiny_folder, tmp_path):
    """The key of a model folder is its weights' hash, not its name or place: a renamed copy
    finds the export of the original; other weights get another key."""
    import shutil

    import torch

    from alignir.encoders.models import load_model

    copy = shutil.copytree(tiny_folder, tmp_path / "another-name")
    key = model_key(get_embedder("prompteol", load_model(str(tiny_folder), device="cpu")))
    assert model_key(get_embedder("prompteol", load_model(str(copy), device="cpu"))) == key
    changed = load_model(str(copy), device="cpu")
    with torch.no_grad():
        next(changed.model.parameters()).add_(1.0)
    changed.model.save_pretrained(copy)
    assert model_key(get_embedder("prompteol", load_model(str(copy), device="cpu"))) != key


def test_int8_quantises_all_but_the_down_projections(tiny_model, root):
    import onnx

    emb = to_onnx(get_embedder("prompteol", tiny_model, progress=False), quantize=True, root=root)
    graph = onnx.load(str(emb._backbone.path)).graph
    ops = [n.op_type for n in graph.node]
    layers = tiny_model.model.config.num_hidden_layers
    assert ops.count("MatMulInteger") == 6 * layers  # q, k, v, o, gate, up per layer
    kept = [n for n in graph.node if n.op_type == "MatMul" and onnx_runtime._module_of(n).endswith("down_proj")]
    assert len(kept) == layers
    model = emb.fingerprint()["model"]
    assert model["precision"] == "int8" and model["runtime"] == "onnx" and "onnxruntime" in model["int8_scheme"]
    ref = get_embedder("prompteol", tiny_model, progress=False).encode_documents(TINY_CORPUS)
    got = emb.encode_documents(TINY_CORPUS)
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.99


def test_bad_runtime_and_bad_model(tiny_model, monkeypatch):
    monkeypatch.delenv("ALIGNIR_RUNTIME", raising=False)
    assert check_runtime(None) == "auto" and check_runtime(" ONNX ") == "onnx"
    with pytest.raises(InvalidInputError, match="unknown runtime"):
        check_runtime("tensorrt")
    monkeypatch.setenv("ALIGNIR_RUNTIME", "Torch")
    assert check_runtime(None) == "torch" and check_runtime("onnx") == "onnx"  # an argument wins
    monkeypatch.setenv("ALIGNIR_RUNTIME", "tvm")
    with pytest.raises(InvalidInputError, match=r"from \$ALIGNIR_RUNTIME"):
        check_runtime(None)
    with pytest.raises(InvalidInputError, match="runtime onnx: precision int8 runs on torch"):
        to_onnx(get_embedder("prompteol", tiny_model, progress=False, precision="int8"))
