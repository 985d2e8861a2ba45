"""What one call to a lent GPU machine sends, and the folders set aside so that it fits.

A call copies the working tree (the files git tracks that are present, the untracked ones it does
not ignore) and the folders the call carries, at most 64 MiB together. The shipped and kept
adapters (``encoders/adapters/``, ``benchmarks/results/``) are most of the tree; a training or
scoring call needs neither (``benchmarks/gpu/gpu_carry.sh`` carries the adapters a run starts
from), so they are deleted from the working tree for the calls and checked out again after:

    python -m benchmarks.gpu.device_tree size --carry .gpu_carry/g1 --carry .gpu_carry/v4
    python -m benchmarks.gpu.device_tree set-aside     # refuses while a file there has uncommitted changes
    python -m benchmarks.gpu.device_tree bring-back    # git checkout -- the folders

``size`` prints the bytes of the tree as a call would send it with the folders set aside (``--as-is``:
as it is now) and, per carried folder, the call's total; it exits 1 when a call is over the limit.
``--keep PATH`` (both commands) leaves a path in the tree: the default model's adapter for
benchmarks/gpu/gpu_e2e.sh (``--keep encoders/adapters/smollm2-135m-alignir-v4``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 << 20  # bytes one call may send: working tree and carried folders together
ASIDE = ("encoders/adapters", "benchmarks/results")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def travelling_files(root: Path = ROOT) -> dict[str, int]:
    """Relative path -> bytes of every file a call sends: tracked and present, or untracked and not ignored
    (a symbolic link travels as a link: its own size)."""
    out = {}
    for rel in _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0"):
        p = root / rel
        if rel and (p.is_file() or p.is_symlink()):
            out[rel] = p.lstat().st_size
    return out


def tree_bytes(root: Path = ROOT, aside: tuple[str, ...] = ASIDE, keep: tuple[str, ...] = ()) -> int:
    """Bytes of the working tree a call sends once the folders ``aside`` are set aside (but ``keep``)."""
    return sum(size for rel, size in travelling_files(root).items() if not _under(rel, aside) or _under(rel, keep))


def folder_bytes(path: Path) -> int:
    """Bytes of every file below ``path`` (a carried folder), or of ``path`` itself."""
    if path.is_file():
        return path.stat().st_size
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(path) for f in files)


def set_aside(root: Path = ROOT, aside: tuple[str, ...] = ASIDE, keep: tuple[str, ...] = ()) -> int:
    """Delete the tracked files of ``aside`` but ``keep`` from the working tree (git keeps them); the bytes removed.
    Refuses while any file there differs from the index or HEAD, or is untracked, so nothing is lost."""
    dirty = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *aside)
    if dirty.strip():
        raise SystemExit(f"uncommitted changes under {', '.join(aside)}; commit them first:\n{dirty}")
    removed = 0
    for rel in _git(root, "ls-files", "-z", "--", *aside).split("\0"):
        p = root / rel
        if rel and p.exists() and not _under(rel, keep):
            removed += p.lstat().st_size
            p.unlink()
    return removed


def bring_back(root: Path = ROOT, aside: tuple[str, ...] = ASIDE) -> None:
    """Check the set-aside files out again (the tracked files of ``aside`` as the index has them)."""
    _git(root, "checkout", "--", *aside)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    size = sub.add_parser("size", help="bytes per call; exit 1 over the limit")
    size.add_argument("--carry", action="append", type=Path, default=[], help="a folder one call carries (repeatable)")
    size.add_argument("--as-is", action="store_true", help="the tree as it is now, nothing set aside")
    aside = sub.add_parser("set-aside", help=f"delete the tracked files of {', '.join(ASIDE)} from the working tree")
    for p in (size, aside):
        p.add_argument("--keep", action="append", default=[], help="a path under them that stays (repeatable)")
    sub.add_parser("bring-back", help="git checkout them again")
    args = ap.parse_args(argv)
    if args.cmd == "set-aside":
        print(f"set aside {set_aside(keep=tuple(args.keep)) / 1e6:.1f} MB ({', '.join(ASIDE)}); bring them back with: "
              f"python -m benchmarks.gpu.device_tree bring-back")
        return 0
    if args.cmd == "bring-back":
        bring_back()
        print(f"checked out {', '.join(ASIDE)} again")
        return 0
    tree = tree_bytes(aside=() if args.as_is else ASIDE, keep=tuple(args.keep))
    print(f"working tree{' as is' if args.as_is else ' with ' + ', '.join(ASIDE) + ' set aside'}: "
          f"{tree / 1e6:.1f} MB of {LIMIT / 1e6:.1f} MB a call may send")
    over = tree > LIMIT
    for c in args.carry:
        total = tree + folder_bytes(c)
        over |= total > LIMIT
        print(f"  + {c}: {total / 1e6:.1f} MB{'  OVER THE LIMIT' if total > LIMIT else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
