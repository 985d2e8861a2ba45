"""The record of the experiment adapters kept under benchmarks/results/adapters and of the
recomputable caches under benchmarks/cache, and their files brought back once they have left the tree.

Each run folder keeps its training record (alignir_train.json: config, seed, data and weight
hashes), its loss and held-out logs and, while it is in the tree, its weights. The record
(benchmarks/results/adapters/adapter_hashes.json) holds, per run: the git commit that holds every
file of the folder (a file that had left the tree when the folder was recorded again names its own
commit), the sha256 and size of each file, the command that scored it
(gpu_train.json), its seed and where its config is; so weights removed from the tree can be
restored and checked bit for bit, and a re-run compared with them.

    python scripts/kept_adapters.py record NAME...|--all   # (re)write the record of run folders in the tree
    python scripts/kept_adapters.py remove NAME...          # their weights leave the tree (recorded as removed)
    python scripts/kept_adapters.py restore NAME|--all      # bring removed files back from their commit
    python scripts/kept_adapters.py check                   # every file present matches its sha256

The caches (benchmarks/cache/cache_hashes.json) are recorded by path, a file or a folder, with the
command that rebuilds them; ``restore-cache`` takes them from their commit, or, where the history
lacks it (or with ``--rebuild``), runs the command and says which files differ from their sha256:

    python scripts/kept_adapters.py record-cache PATH... --command CMD
    python scripts/kept_adapters.py remove-cache PATH...
    python scripts/kept_adapters.py restore-cache PATH...|--all [--rebuild]

``restore`` needs the history (a ``git clone --depth 1`` lacks it: ``git fetch --unshallow``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ROOT / "benchmarks" / "results" / "adapters"
RECORD = ADAPTERS / "adapter_hashes.json"
TRAIN_RESULTS = ROOT / "benchmarks" / "results" / "gpu_train.json"
WEIGHTS = "adapter_model.safetensors"
CACHE = ROOT / "benchmarks" / "cache"
CACHE_RECORD = CACHE / "cache_hashes.json"
REBUILDING = "KEPT_CACHES_REBUILDING"  # the caches whose commands run now (set for their commands)
CACHE_ABOUT = ("Recomputable caches of benchmarks/cache: per path (a file or a folder), the command that rebuilds it, "
               "the commit that holds it and each file's sha256 and bytes. Files listed under 'removed' left the "
               "tree: python scripts/kept_adapters.py restore-cache PATH (from that commit, or by the command "
               "where the history lacks it, checked against the sha256)")
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


class HistoryMissing(RuntimeError):
    """The recorded commit (or the file in it) is not in this clone's history."""


def _read(path: Path, key: str) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {key: {}}


def _write(path: Path, about: str, key: str, record: dict) -> None:
    record["about"] = about
    record[key] = dict(sorted(record[key].items()))
    path.write_text(json.dumps(record, indent=1) + "\n")


def load() -> dict:
    return _read(RECORD, "runs")


def save(record: dict) -> None:
    _write(RECORD, ABOUT, "runs", record)


def load_caches() -> dict:
    return _read(CACHE_RECORD, "caches")


def save_caches(record: dict) -> None:
    _write(CACHE_RECORD, CACHE_ABOUT, "caches", record)


def _committed(rel: str) -> str:
    """The last commit that changed ``rel``, which must be committed unchanged."""
    if git("status", "--porcelain", "--", rel):
        raise SystemExit(f"{rel} has changes that are not committed: commit them first")
    commit = git("log", "-1", "--format=%H", "--", rel)
    if not commit:
        raise SystemExit(f"{rel} is not committed")
    return commit


def from_history(commit: str, rel: str, want: str) -> bytes | None:
    """The bytes of ``rel`` in ``commit`` when they match sha256 ``want`` (None, said on stderr, when
    not); HistoryMissing when this clone lacks the commit or the file."""
    try:
        data = git("show", f"{commit}:{rel}", binary=True)
    except RuntimeError as e:
        raise HistoryMissing(str(e)) from None
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        print(f"{rel}: sha256 {got} in {commit[:12]}, recorded {want}", file=sys.stderr)
        return None
    return data


def _matches(path: Path, want: str) -> bool:
    return path.is_file() and sha256(path) == want


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
    commit = _committed(rel)
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
    """(Re)write the record of run folders ``names``. A run whose weights left the tree keeps their
    entries, each naming the commit that still holds it, so a file added to such a folder later
    (a licence NOTICE) is recorded without bringing the weights back."""
    rec = load()
    for name in names:
        old = rec["runs"].get(name) or {"removed": []}
        back = [f for f in old["removed"] if (ADAPTERS / name / f).exists()]
        if back:
            raise SystemExit(f"{name}: {', '.join(back)} recorded as removed but is in the tree: "
                             f"remove it again (or drop it from 'removed') before recording")
        new = describe(name)
        for fname in old["removed"]:
            new["files"][fname] = {"commit": old["files"][fname].get("commit", old["commit"]), **old["files"][fname]}
            new["removed"].append(fname)
        rec["runs"][name] = new
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
            if _matches(path, want):
                continue
            rel = path.relative_to(ROOT).as_posix()
            try:
                data = from_history(run["files"][fname].get("commit", run["commit"]), rel, want)
            except HistoryMissing as e:
                raise SystemExit(f"{name}: {e} (a shallow clone lacks the history: git fetch --unshallow)") from None
            if data is None:
                bad += 1
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"restored {rel} ({len(data)} bytes)")
    return 1 if bad else 0


def remove(names: list[str]) -> None:
    """The weights of the recorded runs ``names`` leave the tree (marked removed; git rm them)."""
    mark_removed(names, [WEIGHTS])
    for name in names:
        (ADAPTERS / name / WEIGHTS).unlink(missing_ok=True)


def _key(path: str) -> str:
    """A cache path as recorded: relative to the checkout, in posix form."""
    p = Path(os.path.normpath(path))
    return (p.relative_to(ROOT) if p.is_relative_to(ROOT) else p).as_posix()


def describe_cache(key: str, command: str) -> dict:
    """The record of the cache ``key`` (a file, or every file under a folder) as committed."""
    path = ROOT / key
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    if not files:
        raise SystemExit(f"{key} holds no files")
    return {"command": command, "commit": _committed(key),
            "files": {p.relative_to(ROOT).as_posix(): {"sha256": sha256(p), "bytes": p.stat().st_size} for p in files},
            "removed": []}


def record_cache(paths: list[str], command: str) -> None:
    rec = load_caches()
    for key in map(_key, paths):
        if rec["caches"].get(key, {}).get("removed"):
            raise SystemExit(f"{key} left the tree; restore-cache it before recording again")
        rec["caches"][key] = describe_cache(key, command)
        print(f"recorded {key} at {rec['caches'][key]['commit'][:12]} ({len(rec['caches'][key]['files'])} files)")
    save_caches(rec)


def remove_cache(paths: list[str]) -> None:
    """Every file of the recorded caches ``paths`` leaves the tree (marked removed; git rm them)."""
    rec = load_caches()
    for key in map(_key, paths):
        entry = rec["caches"].get(key)
        if entry is None:
            raise SystemExit(f"{key} is not recorded in {CACHE_RECORD.relative_to(ROOT)}")
        entry["removed"] = sorted(entry["files"])
    save_caches(rec)
    for key in map(_key, paths):
        for f in rec["caches"][key]["files"]:
            (ROOT / f).unlink(missing_ok=True)


def rebuild(key: str, entry: dict, files: list[str]) -> int:
    """Runs the cache's command (the checkout's Python first on PATH), then checks ``files``
    against their sha256: 1 when the command fails or gives other bytes, said per file."""
    print(f"{key}: rebuilding: {entry['command']}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           REBUILDING: os.pathsep.join(filter(None, (os.environ.get(REBUILDING), key)))}
    if subprocess.run(entry["command"], shell=True, cwd=ROOT, env=env, check=False).returncode:
        print(f"{key}: the command failed: {entry['command']}", file=sys.stderr)
        return 1
    bad = 0
    for f in files:
        want = entry["files"][f]["sha256"]
        if not (ROOT / f).is_file():
            print(f"{f}: not rebuilt by the command", file=sys.stderr)
            bad += 1
        elif (got := sha256(ROOT / f)) != want:
            print(f"{f}: rebuilt, but sha256 {got} differs from the recorded {want} (the command no longer "
                  f"gives the recorded bytes; the recorded ones are in {entry['commit'][:12]})", file=sys.stderr)
            bad += 1
    return bad


def restore_cache(paths: list[str], rebuild_all: bool = False) -> int:
    """Every removed file of the caches ``paths`` back, bit for bit from its commit, or rebuilt by the
    recorded command where the history lacks it (or with ``rebuild_all``); 1 when any file is not
    the recorded one, 2 when a path is not recorded."""
    rec, bad = load_caches(), 0
    for key in map(_key, paths):
        entry = rec["caches"].get(key)
        if entry is None:
            print(f"{key} is not recorded in {CACHE_RECORD.relative_to(ROOT)}", file=sys.stderr)
            return 2
        if key in os.environ.get(REBUILDING, "").split(os.pathsep):
            print(f"{key}: being rebuilt by its command")  # a step of that command asks for it: no loop
            continue
        todo = [f for f in entry["removed"] if rebuild_all or not _matches(ROOT / f, entry["files"][f]["sha256"])]
        if not todo:
            continue
        if rebuild_all:
            print(f"{key}: --rebuild")
        else:
            try:
                for f in todo:
                    data = from_history(entry["commit"], f, entry["files"][f]["sha256"])
                    if data is None:
                        bad += 1
                        continue
                    (ROOT / f).parent.mkdir(parents=True, exist_ok=True)
                    (ROOT / f).write_bytes(data)
                print(f"restored {key} ({len(todo)} files from {entry['commit'][:12]})")
                continue
            except HistoryMissing as e:
                print(f"{key}: not in this clone's history ({e})")
        bad += rebuild(key, entry, todo)
    return 1 if bad else 0


def _check_files(files: dict, removed: list[str], path_of, label) -> list[str]:
    bad = []
    for fname, meta in files.items():
        path = path_of(fname)
        if not path.is_file():
            if fname not in removed:
                bad.append(f"{label(fname)} is missing and not recorded as removed")
        elif sha256(path) != meta["sha256"]:
            bad.append(f"{label(fname)} differs from its recorded sha256")
    return bad


def check() -> int:
    """Every recorded file that is in the tree matches its sha256, every removed one is absent
    or matches, and every run folder under ADAPTERS is recorded; the caches likewise."""
    rec, caches, bad = load(), load_caches(), []
    for name, run in rec["runs"].items():
        bad += _check_files(run["files"], run["removed"], lambda f, n=name: ADAPTERS / n / f,
                            lambda f, n=name: f"{n}/{f}")
    for entry in caches["caches"].values():
        bad += _check_files(entry["files"], entry["removed"], lambda f: ROOT / f, str)
    folders = {p.name for p in ADAPTERS.iterdir() if p.is_dir()}
    bad += [f"{name} is not recorded (python scripts/kept_adapters.py record {name})"
            for name in sorted(folders - set(rec["runs"]))]
    for line in bad:
        print(line, file=sys.stderr)
    removed = sum(bool(r["removed"]) for r in rec["runs"].values())
    out = sum(bool(c["removed"]) for c in caches["caches"].values())
    print(f"{len(rec['runs'])} runs recorded, {removed} with files out of the tree; {len(caches['caches'])} caches "
          f"recorded, {out} out of the tree; {len(bad)} problems")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("record", "restore", "remove"):
        p = sub.add_parser(cmd)
        p.add_argument("names", nargs="*")
        p.add_argument("--all", action="store_true")
    p = sub.add_parser("record-cache")
    p.add_argument("paths", nargs="+")
    p.add_argument("--command", required=True, help="the command that rebuilds them, run from the checkout")
    sub.add_parser("remove-cache").add_argument("paths", nargs="+")
    p = sub.add_parser("restore-cache")
    p.add_argument("paths", nargs="*")
    p.add_argument("--all", action="store_true")
    p.add_argument("--rebuild", action="store_true", help="run the recorded command even where the history holds them")
    sub.add_parser("check")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return check()
    if args.cmd == "record-cache":
        record_cache(args.paths, args.command)
        return 0
    if args.cmd == "remove-cache":
        remove_cache(args.paths)
        return 0
    if args.cmd == "restore-cache":
        paths = sorted(load_caches()["caches"]) if args.all else args.paths
        if not paths:
            ap.error("name a cache path or give --all")
        return restore_cache(paths, args.rebuild)
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
    if args.cmd == "remove":
        remove(names)
        return 0
    return restore(names)


if __name__ == "__main__":
    sys.exit(main())
