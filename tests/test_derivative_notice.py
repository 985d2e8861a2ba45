"""The licence notice an adapter trained on a base model with derivative terms (Gemma), or distilled
from a teacher under them, carries: written by packaging and by the aligned-token map's fit, and
present in every such folder the repository distributes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alignir.encoders.embedders.adapters import META_FILE, SPARSE_MAP_FILE
from alignir.encoders.train.adapter import NOTICE_FILE, derivative_notice, write_derivative_notice

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(d for base in (ROOT / "encoders/adapters", ROOT / "benchmarks/results/adapters")
                 for d in base.iterdir() if (d / "adapter_config.json").is_file())


def _adapter(folder: Path, base: str, teacher: str | None = None) -> Path:
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "target_modules": ["v_proj", "q_proj"]}))
    (folder / META_FILE).write_text(json.dumps({"base_model": {"name": base}, "hp": {"teacher": teacher}}))
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


@pytest.mark.parametrize(("teacher", "named"), [
    ("embeddinggemma-300m", "EmbeddingGemma-300M"),
    ("google/embeddinggemma-300m", "google/embeddinggemma-300m"),  # a hub id or a local copy
    ("alignir:gemma3-270m-alignir", "gemma3-270m-alignir (an alignir model)"),
])
def test_a_student_distilled_from_a_gemma_teacher_gets_the_gemma_notice_naming_it(tmp_path, teacher, named):
    """The Gemma Terms of Use count a model trained on a Gemma model's outputs as a Model Derivative."""
    text = derivative_notice(_adapter(tmp_path / "s", "smollm2-135m", teacher))
    assert text is not None and "Model Derivative of Gemma" in text and "ai.google.dev/gemma/terms" in text
    flat = " ".join(text.split())
    assert f"LoRA adapter on smollm2-135m trained by distillation from the outputs of {named}," in flat
    assert "LoRA weights (r 8, alpha 16) on q_proj, v_proj" in text


@pytest.mark.parametrize("teacher", ["all-minilm-l6-v2", "alignir:smollm2-135m-alignir-v4", None])
def test_a_student_of_a_teacher_without_such_terms_gets_none(tmp_path, teacher):
    assert derivative_notice(_adapter(tmp_path / "s", "smollm2-135m", teacher)) is None


def test_a_gemma_base_keeps_its_own_notice_whatever_the_teacher(tmp_path):
    text = derivative_notice(_adapter(tmp_path / "g", "gemma3-270m", "embeddinggemma-300m"))
    assert text.startswith("This adapter is a LoRA adapter trained on Gemma 3 270M") and "distillation" not in text


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda d: f"{d.parent.name}/{d.name}")
def test_every_distributed_adapter_carries_the_notice_its_base_model_or_teacher_asks_for(folder):
    due = derivative_notice(folder)
    notice = folder / NOTICE_FILE
    if due is None:
        assert not notice.exists()
    else:
        assert notice.is_file() and notice.read_text() == due
