"""Attacks on a growing index (the ``adds`` part of benchmarks/faults/fault_campaign.py).

New documents (the ADI test queries, recast as documents ``new-0``...) are added to a copy of the
index with ``alignir add``:

- ``add then search equals a rebuild``: the grown index ranks exactly as an index built from the
  union in one go (same model, same cache);
- ``kill during add``: the add is SIGKILLed at spread-out moments, then searched without
  resuming: it must rank as before the add or as after it (never a mix, never unopenable); the
  add is then run again and must give the rebuild's rankings (``recovered``);
- ``search during add``: searches run while an add swaps the grown version in; each must rank as
  one of the two versions, and the last (after the add) as the rebuild.

A case is ``clear_error`` when alignir refused with its own error, ``silent_wrong`` when rankings
matched no version, ``data_lost`` when the index could not be opened afterwards.

Result file: benchmarks/results/faults.json, through the campaign.
Command: python -m benchmarks.faults.fault_campaign --index INDEX --attacks adds
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

N_NEW = 5


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "alignir.retrieval.cli", *args]


def _new_documents(dataset: Path, out: Path) -> list[dict]:
    """The first test queries of ``dataset`` as new documents, written as a corpus.jsonl."""
    rows = [json.loads(line) for line in (dataset / "queries.jsonl").read_text().splitlines() if line.strip()]
    docs = [{"_id": f"new-{i}", "title": "", "text": r["text"]} for i, r in enumerate(rows[:N_NEW])]
    out.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return docs


def run(index: Path, dataset: Path, work: Path, count, rankings, classify, loaded, kills: int = 6) -> None:
    from alignir import build_index
    from alignir.retrieval.beir import read_corpus_jsonl

    base = work / "add-base"
    shutil.copytree(index, base)
    expected_before = rankings(base, loaded)
    new_file = work / "new-docs.jsonl"
    new_docs = _new_documents(dataset, new_file)
    corpus = read_corpus_jsonl(dataset / "corpus.jsonl")
    union = [{"_id": d, "title": corpus[d].title, "text": corpus[d].text} for d in corpus] + new_docs
    rebuilt = work / "add-rebuilt"
    build_index(union, rebuilt, loaded=loaded, progress=False)
    expected_after = rankings(rebuilt, loaded)

    case = work / "add-case"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(base, case)
    subprocess.run(_cli("add", "--index", str(case), str(new_file)), check=True, capture_output=True)
    count("add then search equals a rebuild", classify(case, loaded, [expected_after]))

    for i in range(kills):
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(base, case)
        proc = subprocess.Popen(_cli("add", "--index", str(case), str(new_file)), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(1.0 + i * 2.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        outcome = classify(case, loaded, [expected_before, expected_after])
        again = subprocess.run(_cli("add", "--index", str(case), str(new_file), "--replace"), capture_output=True)
        recovered = again.returncode == 0 and classify(case, loaded, [expected_after]) == "ok"
        count("kill during add", outcome, lost=outcome == "clear", recovered=recovered)

    for _ in range(2):  # readers while an add swaps the grown version in
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(base, case)
        done = threading.Event()

        def writer(done: threading.Event = done) -> None:
            subprocess.run(_cli("add", "--index", str(case), str(new_file), "--wait"), capture_output=True)
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        while not done.is_set():
            count("search during add", classify(case, loaded, [expected_before, expected_after]))
        t.join()
        count("search during add", classify(case, loaded, [expected_after]))
