"""The licence notice an adapter trained on a base model with derivative terms (Gemma) carries:
written by packaging and by the aligned-token map's fit, and present in every such folder the
repository distributes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alignir.encoders.embedders.adapters import META_FILE, SPARSE_MAP_FILE
from alignir.encoders.train.adapter import NOTICE_FILE, derivative_notice, write_derivative_notice

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(d for base in (ROOT / "encoders/adapters", ROOT / "benchmarks/results/adapters")
                 for d in base.iterdir() if (d / "adapter_config.json").is_file())


def _adapter(folder: Path, base: str) -> Path:
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["v_proj", "q_proj"]}))
    (folder / META_FILE).write_text(json.dumps({"base_model": {"name": base}}))
    return folder


def test_a_gemma_adapter_gets_the_gemma_notice_naming_what_was_modified(tmp_path):
    folder = _adapter(tmp_path / "a", "gemma3-270m")
    path = write_derivative_notice(folder)
    text = path.read_text()
    assert path == folder / NOTICE_FILE
    assert "Model Derivative of Gemma" in text and "ai.google.dev/gemma/terms" in text
    assert "LoRA weights (r 8, alpha 16) on q_proj, v_proj" in text and "map before the LM head" not in text
    (folder / SPARSE_MAP_FILE).write_bytes(b"")
    assert "map before the LM head" in derivative_notice(folder)


def test_an_adapter_of_a_base_model_without_such_terms_gets_none(tmp_path):
    folder = _adapter(tmp_path / "s", "smollm2-135m")
    assert write_derivative_notice(folder) is None and not (folder / NOTICE_FILE).exists()


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_every_distributed_adapter_carries_the_notice_its_base_model_asks_for(folder):
    due = derivative_notice(folder)
    notice = folder / NOTICE_FILE
    if due is None:
        assert not notice.exists()
    else:
        assert notice.is_file() and notice.read_text() == due
