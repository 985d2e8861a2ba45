"""Input-file attacks of the fault campaign (benchmarks/faults/fault_campaign.py --attacks inputs).

Qrels, queries, a corpus and training triples are mutated line by line (deleted, emptied,
duplicated, a field removed or blanked, a bad value, a header inserted, a byte order mark, the
line cut in half, CRLF line ends) and read by the reader alignir uses. Each case ends ``clear``
(refused with an error naming the problem), ``ok`` (read, and every non-blank line of the file is
counted: a judgement, query, document or triple that holds what the line says) or ``wrong``
(read, but some line is neither counted nor refused: ``data_lost``, a line dropped silently).

Result file: benchmarks/results/faults.json, through the campaign.
Command: python -m benchmarks.faults.fault_campaign --index INDEX --attacks inputs
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

from alignir.errors import AlignirError

MAX_LINES = 40


def _mutations(line: str, kind: str) -> list[tuple[str, list[str] | None]]:
    """(name, replacement lines) for one line; None deletes it."""
    out: list[tuple[str, list[str] | None]] = [("delete", None), ("empty", [""]), ("duplicate", [line, line]),
                                               ("cut in half", [line[: len(line) // 2]]), ("CRLF", [line + "\r"])]
    if kind == "qrels":
        cols = line.split("\t")
        out += [("negative relevance", ["\t".join(cols[:-1] + ["-1"])]),
                ("fractional relevance", ["\t".join(cols[:-1] + ["0.5"])]),
                ("extra column", ["\t".join(cols + ["x"])]),
                ("header here", ["query-id\tcorpus-id\tscore", line]),
                ("spaces for tabs", [" ".join(cols)])]
    else:
        row = json.loads(line)
        for key in list(row):
            out.append((f"no {key}", [json.dumps({k: v for k, v in row.items() if k != key})]))
            if isinstance(row[key], str):
                out.append((f"blank {key}", [json.dumps({**row, key: "  "})]))
                out.append((f"{key} not a string", [json.dumps({**row, key: 7})]))
        out.append(("not an object", [json.dumps([row])]))
    return out


def _qrels_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _counted(kind: str, lines: list[str], result) -> bool:
    """Every non-blank line is in ``result`` (the header of a qrels file aside)."""
    for n, line in enumerate(lines, 1):
        text = line.strip().lstrip("\ufeff")
        if not text:
            continue
        if kind == "qrels":
            cols = text.split()
            if n == 1 and cols[-1] == "score":
                continue
            qid, did = cols[0], cols[-2]
            if did not in result.get(qid, {}):
                return False
        elif kind in ("queries", "corpus"):
            row = json.loads(text)
            if str(row["_id"]) not in result:
                return False
        else:  # triples
            row = json.loads(text)
            if not any(p.query == row["query"] for p in result):
                return False
    return True


def _readers() -> dict[str, Callable]:
    from alignir.encoders.train.data import load_triples
    from alignir.qrels import read_qrels
    from alignir.retrieval.beir import read_corpus_jsonl, read_queries

    return {"qrels": read_qrels, "queries": read_queries, "corpus": read_corpus_jsonl, "triples": load_triples}


def _triples_file(dataset: Path, out: Path) -> Path:
    """Training triples from the dataset: each judged query, its first relevant document and
    another document as the negative."""
    from alignir.qrels import read_qrels
    from alignir.retrieval.beir import read_corpus_jsonl, read_queries

    corpus, queries = read_corpus_jsonl(dataset / "corpus.jsonl"), read_queries(dataset / "queries.jsonl")
    ids = list(corpus)
    rows = []
    for qid, rel in list(read_qrels(dataset / "qrels" / "test.tsv").items())[:MAX_LINES]:
        pos = next(d for d in rel if d in corpus)
        neg = next(d for d in ids if d not in rel)
        rows.append(json.dumps({"query": queries[qid], "positive": corpus[pos].contents,
                                "negatives": [corpus[neg].contents]}))
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def run(dataset: Path, work: Path, count: Callable[..., None]) -> None:
    """Mutate every line of the first MAX_LINES of each input file of ``dataset`` (a BEIR folder)."""
    logging.getLogger("alignir").setLevel(logging.ERROR)  # negative relevance warns, as it should
    readers = _readers()
    files = {"qrels": dataset / "qrels" / "test.tsv", "queries": dataset / "queries.jsonl",
             "corpus": dataset / "corpus.jsonl", "triples": _triples_file(dataset, work / "triples.jsonl")}
    for kind, path in files.items():
        lines = _qrels_lines(path)
        header = 1 if kind == "qrels" and lines and lines[0].split()[-1:] == ["score"] else 0
        body = lines[:header + MAX_LINES]
        for i in range(header, len(body)):
            for name, repl in _mutations(body[i], kind):
                mutated = body[:i] + ([] if repl is None else repl) + body[i + 1:]
                case = work / f"{kind}{path.suffix}"
                case.write_text("\n".join(mutated) + "\n", encoding="utf-8", newline="")
                try:
                    result = readers[kind](case)
                except (AlignirError, OSError, ValueError):
                    count(f"input: {kind} mutated line by line", "clear")
                    continue
                try:
                    ok = _counted(kind, mutated, result)
                except (ValueError, KeyError, IndexError, TypeError):
                    ok = False  # a line that is no record was read without error: it was dropped
                count(f"input: {kind} mutated line by line", "ok" if ok else "wrong", lost=not ok)
        # a byte order mark and a header-less first judgement
        bom = work / f"bom{path.suffix}"
        bom.write_text("\ufeff" + "\n".join(body) + "\n", encoding="utf-8")
        try:
            ok = _counted(kind, body, readers[kind](bom))
            count(f"input: {kind} mutated line by line", "ok" if ok else "wrong", lost=not ok)
        except (AlignirError, OSError, ValueError):
            count(f"input: {kind} mutated line by line", "clear")
