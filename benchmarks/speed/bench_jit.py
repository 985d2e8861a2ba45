"""What a fresh install's first sparse search waits for (numba compiling the kernels) and the
kernels' warm speed, for the index package of the working tree or of a git revision.

Each (revision, posting type) runs in its own process with an empty ``NUMBA_CACHE_DIR``: it builds
a Zipf collection, times the first batch search (one thread: it compiles the kernels of that
posting type), the first filtered search, the first two-thread search (numba's parallel kernel),
then the warm batch QPS of the pruned and the exhaustive kernel (best of ``--repeats``).
``--rev REV`` loads the index package as of REV (``git archive`` into a temporary folder, put in
place of ``alignir.index``'s own path) and ``--rev WORKTREE`` the working tree's, so that two
versions compare in one run on one machine; the rounds alternate the revisions, and every
revision's results must equal the first one's, ids and float32 score bits (``equal``).

Rows go to benchmarks/results/jit_compile.json (keyed by commit and posting type, with the
commit, ``load`` = uptime at the start, and ``command``).

    nice -n 10 .venv/bin/python -m benchmarks.speed.bench_jit --rev HEAD~1 --rev WORKTREE
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks/results/jit_compile.json"
POSTINGS = ("float32", "uint8", "uint16")


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def child(package: str, postings: str, n_docs: int, repeats: int, out_npz: str) -> dict:
    """Runs in a fresh process: the first-call times, then the warm QPS (one JSON line)."""
    import alignir.index

    if package:  # the index package of another revision, in place of the installed one
        alignir.index.__path__ = [package]
    from benchmarks.speed import bench_sparse_index as base
    from alignir.index.sparse import SparseIndex

    D = base.zipf_csr(n_docs, 40, 30_000, seed=1)
    Q = base.zipf_csr(200, 8, 30_000, seed=2)
    idx = SparseIndex.from_csr(D, quantize=None if postings == "float32" else postings)
    row = {}
    row["first_search_s"], (docs, scores) = _timed(lambda: idx.search(Q, 10, threads=1))
    allowed = np.arange(0, n_docs, 7)
    row["first_filtered_s"], (fdocs, _) = _timed(lambda: idx.search(Q, 10, threads=1, allowed=allowed))
    row["first_two_threads_s"], (tdocs, _) = _timed(lambda: idx.search(Q, 10, threads=2))
    for kernel, prune in (("pruned", "on"), ("exhaustive", "off")):
        best, _, _ = base.best_time(lambda p=prune: idx.search(Q, 10, threads=1, prune=p), repeats)
        row[f"qps_{kernel}"] = round(Q.shape[0] / best, 1)
    np.savez(out_npz, docs=docs, bits=scores.view(np.uint32), fdocs=fdocs, tdocs=tdocs)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def _package(rev: str, tmp: Path) -> tuple[str, str]:
    """(folder of the index package, commit) of a revision; WORKTREE: the working tree's."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    if rev == "WORKTREE":
        dirty = subprocess.run(["git", "status", "--porcelain", "index"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
        return "", head + ("+dirty" if dirty else "")
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    dest = tmp / commit
    if not dest.exists():
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit, "index"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return str(dest / "index"), commit


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", action="append", help="a git revision, or WORKTREE (default: WORKTREE)")
    ap.add_argument("--postings", default=",".join(POSTINGS))
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2, help="each revision this many times, alternating")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--child", nargs=3, metavar=("PACKAGE", "POSTINGS", "NPZ"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], a.docs, a.repeats, a.child[2])))
        return
    revs = a.rev or ["WORKTREE"]
    command = "python -m benchmarks.speed.bench_jit " + " ".join(sys.argv[1:] if argv is None else argv)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rows: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        packages = {rev: _package(rev, tmp) for rev in revs}
        reference: dict[str, dict] = {}
        runs = 0
        for rnd in range(a.rounds):
            for postings in a.postings.split(","):
                for rev in revs:
                    package, commit = packages[rev]
                    runs += 1
                    cache = tmp / f"numba-{runs}"  # empty: every run compiles
                    npz = tmp / f"{cache.name}.npz"
                    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
                    proc = subprocess.run([sys.executable, __file__, "--docs", str(a.docs), "--repeats",
                                           str(a.repeats), "--child", package, postings, str(npz)],
                                          env=env, capture_output=True, text=True)
                    if proc.returncode:
                        sys.exit(f"{rev} {postings}: {proc.stderr.strip()[-2000:]}")
                    got = json.loads(proc.stdout.strip().splitlines()[-1])
                    res = dict(np.load(npz))
                    ref = reference.setdefault(postings, res)
                    got["equal"] = all(np.array_equal(res[k], ref[k]) for k in ref)
                    print(rev, postings, got, flush=True)
                    rows.setdefault((rev, postings), {"rev": rev, "commit": commit, "postings": postings,
                                                      "docs": a.docs, "rounds": []})["rounds"].append(got)
    results = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {"rows": []}
    keep = {(r["commit"], r["postings"]): r for r in results["rows"]}
    for row in rows.values():
        rounds = row["rounds"]
        for field in ("first_search_s", "first_filtered_s", "first_two_threads_s"):
            row[field] = float(np.median([r[field] for r in rounds]))
        for field in ("qps_pruned", "qps_exhaustive"):
            row[field] = max(r[field] for r in rounds)
        row["equal"] = all(r["equal"] for r in rounds)
        row.update(load=load, command=command)
        keep[(row["commit"], row["postings"])] = row
    results["rows"] = list(keep.values())
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
