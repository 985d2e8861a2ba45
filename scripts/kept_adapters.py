"""The record of the experiment adapters kept under benchmarks/results/adapters, and their weights
brought back from git history once they have left the tree.

Each run folder keeps its training record (alignir_train.json: config, seed, data and weight
hashes), its loss and held-out logs and, while it is in the tree, its weights. The record
(benchmarks/results/adapters/adapter_hashes.json) holds, per run: the git commit that holds every
file of the folder, the sha256 and size of each file, the command that scored it
(gpu_train.json), its seed and where its config is; so weights removed from the tree can be
restored and checked bit for bit, and a re-run compared with them.

    python scripts/kept_adapters.py record NAME...|--all   # (re)write the record of run folders in the tree
    python scripts/kept_adapters.py restore NAME|--all      # bring removed files back from their commit
    python scripts/kept_adapters.py check                   # every file present matches its sha256

``restore`` needs the history (a ``git clone --depth 1`` lacks it: ``git fetch --unshallow``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ROOT / "benchmarks" / "results" / "adapters"
RECORD = ADAPTERS / "adapter_hashes.json"
TRAIN_RESULTS = ROOT / "benchmarks" / "results" / "gpu_train.json"
ABOUT = ("Experiment adapters of benchmarks/results/adapters: per run, the commit that holds every file, "
         "each file's sha256 and bytes, the scoring command (gpu_train.json), the seed and the config file. "
         "Files listed under 'removed' left the tree: python scripts/kept_adapters.py restore NAME")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git(*args: str, binary: bool = False) -> str | bytes:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=False)
    if out.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout if binary else out.stdout.decode().strip()


def load() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.is_file() else {"about": ABOUT, "runs": {}}


def save(record: dict) -> None:
    record["about"] = ABOUT
    record["runs"] = dict(sorted(record["runs"].items()))
    RECORD.write_text(json.dumps(record, indent=1) + "\n")


def _seed(train: dict) -> int | None:
    """The seed of a run from its alignir_train.json (its config, stored as text or as an object)."""
    config = train.get("config")
    if isinstance(config, dict):
        return config.get("seed")
    m = re.search(r"'seed': (\d+)", str(config or ""))
    return int(m.group(1)) if m else None


def describe(name: str) -> dict:
    """The record of run folder ``name`` as it is in the tree and in the last commit that changed it;
    every file must be committed unchanged (a file not yet committed has no commit to restore from)."""
    folder = ADAPTERS / name
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if not files:
        raise SystemExit(f"{folder} holds no files")
    rel = folder.relative_to(ROOT).as_posix()
    dirty = git("status", "--porcelain", "--", rel)
    if dirty:
        raise SystemExit(f"{rel} has changes that are not committed: commit them first")
    commit = git("log", "-1", "--format=%H", "--", rel)
    if not commit:
        raise SystemExit(f"{rel} is not committed")
    runs = json.loads(TRAIN_RESULTS.read_text()).get("runs", {}) if TRAIN_RESULTS.is_file() else {}
    train_file = folder / "alignir_train.json"
    train = json.loads(train_file.read_text()) if train_file.is_file() else {}
    return {"commit": commit,
            "command": runs.get(name, {}).get("command"),
            "seed": _seed(train),
            "config": f"{rel}/alignir_train.json" if train_file.is_file() else None,
            "files": {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size} for p in files},
            "removed": []}


def record(names: list[str]) -> None:
    rec = load()
    for name in names:
        old = rec["runs"].get(name)
        if old and old["removed"]:
            raise SystemExit(f"{name}: {', '.join(old['removed'])} left the tree; restore it before recording again")
        rec["runs"][name] = describe(name)
        print(f"recorded {name} at {rec['runs'][name]['commit'][:12]}")
    save(rec)


def mark_removed(names: list[str], files: list[str]) -> None:
    """Note that ``files`` of the runs ``names`` left the tree (they stay in the recorded commit)."""
    rec = load()
    for name in names:
        run = rec["runs"][name]
        run["removed"] = sorted(set(run["removed"]) | {f for f in files if f in run["files"]})
    save(rec)


def restore(names: list[str]) -> int:
    rec, bad = load(), 0
    for name in names:
        run = rec["runs"].get(name)
        if run is None:
            raise SystemExit(f"{name} is not recorded in {RECORD.relative_to(ROOT)}")
        for fname in run["removed"]:
            path = ADAPTERS / name / fname
            want = run["files"][fname]["sha256"]
            if path.is_file() and sha256(path) == want:
                continue
            rel = path.relative_to(ROOT).as_posix()
            try:
                data = git("show", f"{run['commit']}:{rel}", binary=True)
            except RuntimeError as e:
                raise SystemExit(f"{name}: {e} (a shallow clone lacks the history: git fetch --unshallow)") from None
            got = hashlib.sha256(data).hexdigest()
            if got != want:
                print(f"{rel}: sha256 {got} in {run['commit'][:12]}, recorded {want}", file=sys.stderr)
                bad += 1
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"restored {rel} ({len(data)} bytes)")
    return 1 if bad else 0


def check() -> int:
    """Every recorded file that is in the tree matches its sha256, every removed one is absent
    or matches, and every run folder under ADAPTERS is recorded."""
    rec, bad = load(), []
    for name, run in rec["runs"].items():
        for fname, meta in run["files"].items():
            path = ADAPTERS / name / fname
            if not path.is_file():
                if fname not in run["removed"]:
                    bad.append(f"{name}/{fname} is missing and not recorded as removed")
            elif sha256(path) != meta["sha256"]:
                bad.append(f"{name}/{fname} differs from its recorded sha256")
    folders = {p.name for p in ADAPTERS.iterdir() if p.is_dir()}
    bad += [f"{name} is not recorded (python scripts/kept_adapters.py record {name})"
            for name in sorted(folders - set(rec["runs"]))]
    for line in bad:
        print(line, file=sys.stderr)
    removed = sum(bool(r["removed"]) for r in rec["runs"].values())
    print(f"{len(rec['runs'])} runs recorded, {removed} with files out of the tree, {len(bad)} problems")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("record", "restore"):
        p = sub.add_parser(cmd)
        p.add_argument("names", nargs="*")
        p.add_argument("--all", action="store_true")
    sub.add_parser("check")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return check()
    if args.all:
        names = sorted(p.name for p in ADAPTERS.iterdir() if p.is_dir()) if args.cmd == "record" \
            else sorted(load()["runs"])
    else:
        names = args.names
    if not names:
        ap.error("name a run or give --all")
    if args.cmd == "record":
        record(names)
        return 0
    return restore(names)


if __name__ == "__main__":
    sys.exit(main())
