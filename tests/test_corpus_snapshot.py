"""The package corpora the long training runs draw from are kept in the repository as first built
(benchmarks/cache/corpora/NAME/: corpus.jsonl.gz + SOURCE.json), so that a run resumed on another
machine sees the same texts. The larger snapshots left the tree (benchmarks/cache/cache_hashes.json
records them; scripts/kept_adapters.py restore-cache brings them back from their commit): they are
read from that commit here. Each snapshot must be the corpus its SOURCE.json describes: the same
bytes (sha256), the same record count, and the overlap check against the evaluation collections
passed when it was built."""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "benchmarks" / "cache" / "corpora"
NAMES = sorted(p.name for p in SNAPSHOT.iterdir()) if SNAPSHOT.is_dir() else []


def _snapshot(name: str) -> bytes:
    """The corpus.jsonl.gz of ``name``: in the tree, or from the commit recorded when it left it."""
    import importlib.util

    path = SNAPSHOT / name / "corpus.jsonl.gz"
    if path.is_file():
        return path.read_bytes()
    spec = importlib.util.spec_from_file_location("kept_adapters", ROOT / "scripts" / "kept_adapters.py")
    kept = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kept)
    key = path.relative_to(ROOT).as_posix()
    entry = kept.load_caches()["caches"][key]
    assert key in entry["removed"], f"{key} is neither in the tree nor recorded as removed"
    try:
        data = kept.from_history(entry["commit"], key, entry["files"][key]["sha256"])
    except kept.HistoryMissing:
        pytest.skip(f"{key} left the tree and this clone lacks its commit (git fetch --unshallow)")
    assert data is not None, f"{key} in {entry['commit']} is not the recorded file"
    return data


def test_the_long_runs_corpora_are_all_kept():
    assert NAMES == sorted(["wordnet", "foldoc", "freeciv-nations", "python-docs", "debian-descriptions", "manpages",
                            "biomedical-ontologies"])


@pytest.mark.parametrize("name", NAMES)
def test_a_kept_corpus_is_the_one_its_source_file_describes(name):
    source = json.loads((SNAPSHOT / name / "SOURCE.json").read_text())
    data = gzip.decompress(_snapshot(name))
    assert source["name"] == name
    assert hashlib.sha256(data).hexdigest() == source["corpus_sha256"]
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines()]
    assert len(rows) == source["records"] and len({r["_id"] for r in rows}) == len(rows)
    assert all(r["text"].strip() for r in rows)
    assert set(source["overlap_check"]["collections"]) >= {"adi", "cisi", "cran", "med", "scifact"}
    assert source["overlap_check"]["result"].startswith("no record contains a sentence")


@pytest.mark.e2e  # run_lib.sh's steps run $PYTHON in child processes
def test_a_kept_corpus_replaces_a_stale_local_build_and_leaves_a_current_one(tmp_path):
    """benchmarks/training/run_lib.sh ``unpack_corpus``: a folder holding another build of the corpus (the
    archive moved on) is replaced by the kept one; a folder that holds it already is left alone."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    kept = SNAPSHOT / "freeciv-nations"
    dest = tmp_path / "corpora" / "freeciv-nations"
    dest.mkdir(parents=True)
    (dest / "corpus.jsonl").write_text('{"_id": "x", "title": "", "text": "a later build"}\n')

    def unpack() -> str:
        env = {**os.environ, "PYTHON": sys.executable, "RUNS": str(tmp_path / "runs")}
        env.pop("STOP_AT", None)
        script = f'ROOT="{root}"; source "{root}/benchmarks/training/run_lib.sh"; unpack_corpus "{kept}" "{dest}"'
        return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout

    assert "unpacked" in unpack()
    want = json.loads((kept / "SOURCE.json").read_text())["corpus_sha256"]
    assert hashlib.sha256((dest / "corpus.jsonl").read_bytes()).hexdigest() == want
    assert (dest / "SOURCE.json").read_bytes() == (kept / "SOURCE.json").read_bytes()
    assert unpack() == ""  # already there
