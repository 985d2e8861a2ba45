"""Instructions the sparse kernels execute per batch search, counted by valgrind's callgrind:
a speed comparison of two versions of the index package that does not depend on the load of
the machine (wall-clock QPS on these shared 2-core machines moves by 10-25% from run to run).

For each (revision, posting type) a child process builds the Zipf collection of
``bench_jit.py``, warms the pruned and the exhaustive kernel once (numba compiles them, or loads
them from a per-revision ``NUMBA_CACHE_DIR`` filled by an earlier uninstrumented run), then runs
``--repeats`` single-thread batch searches of each kernel with callgrind's instrumentation on
only around them (client requests from a small C helper built here with gcc and
``valgrind/callgrind.h``). The count includes the Python side of ``SparseIndex.search``, which is
the same code for every revision compared; it is deterministic for a machine, revision and
input, so a difference of a fraction of a percent is real. Instructions are not cycles: a
change in memory behaviour or vectorisation width shows only partly.

Rows go to benchmarks/results/kernel_instructions.json (keyed by commit and posting type, with
``instructions_pruned`` / ``instructions_exhaustive`` per batch of 200 queries and ``command``).

    nice -n 10 .venv/bin/python -m benchmarks.speed.bench_kernel_instructions --rev HEAD~1 --rev WORKTREE
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.speed.bench_jit import POSTINGS, _package

ROOT = Path(__file__).resolve().parents[2]

OUT = ROOT / "benchmarks/results/kernel_instructions.json"
KERNELS = (("pruned", "on"), ("exhaustive", "off"))
_TOGGLE_C = """
#include <valgrind/callgrind.h>
void cg_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_off(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def build_toggle(tmp: Path) -> Path:
    """The client-request helper as a shared library (needs gcc and valgrind's headers)."""
    src, lib = tmp / "cg_toggle.c", tmp / "cg_toggle.so"
    src.write_text(_TOGGLE_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def child(package: str, postings: str, n_docs: int, repeats: int, lib: str) -> None:
    """Warm each kernel, then search ``repeats`` times with the instrumentation on (when ``lib``)."""
    import numpy as np

    import alignir.index

    if package:
        alignir.index.__path__ = [package]
    from benchmarks.speed import bench_sparse_index as base
    from alignir.index.sparse import SparseIndex

    toggle = ctypes.CDLL(lib) if lib else None
    D = base.zipf_csr(n_docs, 40, 30_000, seed=1)
    Q = base.zipf_csr(200, 8, 30_000, seed=2)
    idx = SparseIndex.from_csr(D, quantize=None if postings == "float32" else postings)
    for kernel, prune in KERNELS:
        first = idx.search(Q, 10, threads=1, prune=prune)
        if toggle:
            toggle.cg_on()
        for _ in range(repeats):
            got = idx.search(Q, 10, threads=1, prune=prune)
        if toggle:
            toggle.cg_off(kernel.encode())
        assert all(np.array_equal(a, b) for a, b in zip(first, got))


def _dumps(prefix: str) -> dict[str, int]:
    """{label: instructions} of the callgrind dumps written as ``prefix``.N."""
    out = {}
    for path in glob.glob(prefix + ".*"):
        text = Path(path).read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        total = re.search(r"^totals: (\d+)", text, re.M)  # a dump's "summary" can read 0
        if label and total:
            out[label.group(1)] = int(total.group(1))
    return out


def measure(rev: str, package: str, postings: str, a, tmp: Path, lib: Path) -> dict[str, int]:
    cache = tmp / f"numba-{re.sub(r'[^A-Za-z0-9]', '_', rev)}"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONHASHSEED": "0",
           "PYTHONPATH": str(ROOT)}
    args = ["-m", "benchmarks.speed.bench_kernel_instructions", "--docs", str(a.docs), "--repeats", str(a.repeats),
            "--child", package or "-", postings]
    # 1. compile into the cache natively (compiling under valgrind would take ~50x as long)
    subprocess.run([sys.executable, *args, "-"], env=env, cwd=ROOT, check=True)
    # 2. count, loading the kernels from that cache
    prefix = str(tmp / f"cg-{cache.name}-{postings}")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}",
                    sys.executable, *args, str(lib)], env=env, cwd=ROOT, check=True, capture_output=True)
    counts = _dumps(prefix)
    missing = [k for k, _ in KERNELS if k not in counts]
    if missing:
        sys.exit(f"{rev} {postings}: no callgrind dump for {missing}")
    return {f"instructions_{k}": counts[k] // a.repeats for k, _ in KERNELS}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", action="append", help="a git revision, or WORKTREE (default: WORKTREE)")
    ap.add_argument("--postings", default=",".join(POSTINGS))
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--child", nargs=3, metavar=("PACKAGE", "POSTINGS", "LIB"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        package, postings, lib = (x if x != "-" else "" for x in a.child)
        child(package, postings, a.docs, a.repeats, lib)
        return
    revs = a.rev or ["WORKTREE"]
    command = "python -m benchmarks.speed.bench_kernel_instructions " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        lib = build_toggle(tmp)
        packages = {rev: _package(rev, tmp) for rev in revs}
        for postings in a.postings.split(","):
            for rev in revs:
                package, commit = packages[rev]
                row = {"rev": rev, "commit": commit, "postings": postings, "docs": a.docs,
                       "repeats": a.repeats, **measure(rev, package, postings, a, tmp, lib)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    results = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {"rows": []}
    keep = {(r["commit"], r["postings"]): r for r in results["rows"]}
    for row in rows:
        keep[(row["commit"], row["postings"])] = {**row, "command": command}
    results["rows"] = list(keep.values())
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
