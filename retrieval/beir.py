"""BEIR folder loading with validation.

Layout (Thakur et al., BEIR, NeurIPS 2021 datasets track)::

    FOLDER/corpus.jsonl       {"_id", "title", "text"} one object per line
    FOLDER/queries.jsonl      {"_id", "text"}
    FOLDER/qrels/SPLIT.tsv    query-id <tab> corpus-id <tab> score   (header line)

A document's text is ``title + " " + text`` (stripped), as BEIR's dense-retrieval
evaluation concatenates them. Readers collect *every* problem of a file before raising,
so one run tells the user all line numbers to fix; ``skip_bad=True`` drops bad lines and
records them in ``.skipped`` instead.
"""
from __future__ import annotations

from alignir.errors import CorpusError, DownloadError, InvalidInputError, QueriesError
from alignir.io import replace_dir
from alignir.qrels import read_qrels

import hashlib
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

__all__ = [
    "BEIR_URL",
    "BeirConsistencyWarning",
    "BeirDataset",
    "Corpus",
    "Document",
    "Skipped",
    "beir_url",
    "download_beir",
    "download_dir",
    "load_beir",
    "iter_corpus_jsonl",
    "read_corpus_jsonl",
    "read_qrels",
    "read_queries",
    "resolve_dataset",
]

#: The standard BEIR download location (same as ``beir.util.download_and_unzip``).
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
#: Environment variable listing folders (os.pathsep-separated) that hold BEIR datasets.
DATA_ENV = "ALIGNIR_DATA"
#: Environment variable naming a mirror of BEIR's download folder (``{base}/{name}.zip``).
URL_ENV = "ALIGNIR_BEIR_URL"
#: md5 of the zips on BEIR's host, as BEIR's dataset table publishes them.
BEIR_MD5 = {
    "arguana": "8ad3e3c2a5867cdced806d6503f29b99",
    "fiqa": "17918ed23cd04fb15047f73e6c3bd9d9",
    "hotpotqa": "f412724f78b0d91183a0e86805e16114",
    "nfcorpus": "a89dba18a62ef92f7d323ec890a0d38d",
    "nq": "d4d3d2e48787a744b6f6e691ff534307",
    "scifact": "5f7d1de60b170fc8027bb7898e2efca1",
    "trec-covid": "ce62140cb23feb9becf6270d0d1fe6d1",
    "webis-touche2020": "46f650ba5a527fc69e0a6521c5a23563",
}


class BeirConsistencyWarning(UserWarning):
    """qrels refer to queries or documents that the folder does not contain."""


@dataclass(frozen=True)
class Skipped:
    """A line left out by ``skip_bad=True`` (1-based line number)."""

    line: int
    reason: str


@dataclass(frozen=True)
class Document:
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The text that gets encoded: title + " " + text, as BEIR does."""
        return f"{self.title} {self.text}".strip()


class Corpus(dict):
    """``dict[doc_id, Document]`` in file order, plus ``skipped`` lines and ``path``."""

    def __init__(self, *args, skipped: list[Skipped] | None = None, path: str = "", **kw):
        super().__init__(*args, **kw)
        self.skipped: list[Skipped] = list(skipped or [])
        self.path = path

    def ids(self) -> list[str]:
        return list(self.keys())

    def texts(self) -> list[str]:
        return [d.contents for d in self.values()]


def _jsonl_objects(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Yield (line number, object or None, problem or None); blank lines are ignored."""
    with open(path, "rb") as fh:
        for ln, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield ln, None, f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}"
                continue
            if ln == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield ln, None, f"malformed JSON ({e.msg}, column {e.colno})"  # msg may end in "at"
                continue
            if not isinstance(obj, dict):
                yield ln, None, f"expected a JSON object, got {type(obj).__name__}"
                continue
            yield ln, obj, None


def _get_id(obj: dict, first_line: dict[str, int]) -> tuple[str | None, str | None]:
    """(id, None) for a valid ``_id`` not seen yet (``first_line``: id -> line of the ids read so
    far), else (None, problem)."""
    if "_id" not in obj:
        return None, 'missing "_id"'
    raw = obj["_id"]
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        return None, f'"_id" must be a string, got {type(raw).__name__}'
    doc_id = str(raw)
    if not doc_id.strip():
        return None, 'empty "_id"'
    if any(c.isspace() for c in doc_id):
        return None, f'"_id" {doc_id!r} contains whitespace (TREC runs cannot hold it)'
    if doc_id in first_line:
        return None, f"duplicate _id {doc_id!r} (first seen on line {first_line[doc_id]})"
    return doc_id, None


def _get_str(obj: dict, key: str, required: bool) -> tuple[str, str | None]:
    if key not in obj or obj[key] is None:
        return "", (f'missing "{key}"' if required else None)
    if not isinstance(obj[key], str):
        return "", f'"{key}" must be a string, got {type(obj[key]).__name__}'
    return obj[key], None


def _check_file(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{what} file not found: {p}")
    if p.is_dir():
        raise IsADirectoryError(f"{what} path is a directory, expected a .jsonl file: {p}")
    return p


def _check_empty_rule(empty: str) -> None:
    if empty not in ("error", "skip", "keep"):
        raise InvalidInputError(f"empty must be 'error', 'skip' or 'keep', got {empty!r}")


def read_corpus_jsonl(path: str | Path, skip_bad: bool = False, empty: str = "error") -> Corpus:
    """Read a BEIR corpus.jsonl into a :class:`Corpus` (``dict[id, Document]``).

    Problems detected (all reported at once, with 1-based line numbers): invalid UTF-8,
    malformed JSON, non-object lines, missing/non-string/whitespace ``_id``, duplicate
    ``_id`` (the first occurrence wins), missing ``text``, empty title+text. An empty
    corpus is always an error. ``skip_bad=True`` drops bad lines and lists them in
    ``corpus.skipped`` instead of raising.

    ``empty`` decides what a document with empty title and text is: ``"error"`` (a
    problem like the others), ``"skip"`` (always dropped and listed in ``skipped``, e.g.
    Cranfield docs 471 and 995) or ``"keep"``.
    """
    _check_empty_rule(empty)
    p = _check_file(path, "corpus")
    problems: list[tuple[int, str]] = []
    empties: list[tuple[int, str]] = []
    docs = dict(iter_corpus_jsonl(p, problems, empties, empty))
    if problems and not skip_bad:
        raise CorpusError(p, problems)
    if not docs:
        raise CorpusError(p, problems + empties + [(0, "corpus is empty: no valid documents")])
    skipped = sorted(problems + empties)
    return Corpus(docs, skipped=[Skipped(ln, why) for ln, why in skipped], path=str(p))


def iter_corpus_jsonl(path: Path, problems: list[tuple[int, str]], empties: list[tuple[int, str]],
                      empty: str = "error") -> Iterator[tuple[str, Document]]:
    """The valid documents of a corpus.jsonl as ``(id, Document)`` in file order, one line in
    memory at a time (the checks of :func:`read_corpus_jsonl`); each bad line is appended to
    ``problems`` and each document skipped for empty title and text to ``empties``, as
    ``(line number, reason)``. The caller decides what the problems mean."""
    _check_empty_rule(empty)
    first_line: dict[str, int] = {}
    for ln, obj, why in _jsonl_objects(path):
        if obj is not None:
            doc_id, why = _get_id(obj, first_line)
            if why is None:
                title, why_t = _get_str(obj, "title", required=False)
                text, why = _get_str(obj, "text", required=True)
                why = why_t or why
                if why is None and empty != "keep" and not f"{title} {text}".strip():
                    why = f"document {doc_id!r} has empty title and text"
                    if empty == "skip":
                        empties.append((ln, why))
                        first_line[doc_id] = ln
                        continue
            if why is None:
                first_line[doc_id] = ln
                yield doc_id, Document(title=title, text=text)
                continue
        problems.append((ln, why))


def read_queries(path: str | Path, skip_bad: bool = False) -> dict[str, str]:
    """Read a BEIR queries.jsonl -> ``{query_id: text}`` (file order).

    Same checks as the corpus (UTF-8, JSON, ``_id``, duplicates, empty text). With
    ``skip_bad`` bad lines are dropped and a warning names them.
    """
    p = _check_file(path, "queries")
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    problems: list[tuple[int, str]] = []
    for ln, obj, why in _jsonl_objects(p):
        if obj is not None:
            qid, why = _get_id(obj, first_line)
            if why is None:
                text, why = _get_str(obj, "text", required=True)
                if why is None and not text.strip():
                    why = f"query {qid!r} has empty text"
            if why is None:
                queries[qid] = text
                first_line[qid] = ln
                continue
        problems.append((ln, why))
    if problems and not skip_bad:
        raise QueriesError(p, problems)
    if problems:
        warnings.warn(str(QueriesError(p, problems)).replace("problem(s)", "line(s) skipped"), stacklevel=2)
    if not queries:
        raise QueriesError(p, problems + [(0, "no valid queries")])
    return queries


@dataclass
class BeirDataset:
    """A loaded BEIR split. ``queries`` holds only the queries judged in ``qrels``."""

    corpus: Corpus
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    name: str = ""
    folder: str = ""
    split: str = "test"
    issues: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return (
            f"BeirDataset({self.name!r}, split={self.split!r}, docs={len(self.corpus)}, "
            f"queries={len(self.queries)}, judgements={sum(map(len, self.qrels.values()))})"
        )


def load_beir(
    folder: str | Path,
    split: str = "test",
    skip_bad: bool = False,
    strict: bool = False,
    empty: str = "skip",
    data_dir: str | Path | None = None,
    download: bool = False,
) -> BeirDataset:
    """Load and cross-check a BEIR folder (or dataset name, see :func:`resolve_dataset`).

    Consistency: queries are restricted to those with judgements in ``qrels``; judged
    queries missing from queries.jsonl are dropped from qrels; judged documents missing
    from the corpus are kept (they count as unretrieved, which lowers recall exactly as in
    BEIR). Both are reported with counts as a :class:`BeirConsistencyWarning` and in
    ``dataset.issues``; ``strict=True`` raises ``ValueError`` instead. Documents with
    empty title and text are dropped by default (``empty="skip"``, see
    :func:`read_corpus_jsonl`) and reported the same way. ``data_dir``/``download`` are
    passed to :func:`resolve_dataset`.
    """
    root = resolve_dataset(folder, data_dir=data_dir, download=download)
    corpus = read_corpus_jsonl(root / "corpus.jsonl", skip_bad=skip_bad, empty=empty)
    all_queries = read_queries(root / "queries.jsonl", skip_bad=skip_bad)
    qrels = read_qrels(root, split)

    issues: list[str] = []
    missing_q = [q for q in qrels if q not in all_queries]
    if missing_q:
        issues.append(
            f"{len(missing_q)} of {len(qrels)} judged queries are not in queries.jsonl "
            f"(e.g. {', '.join(missing_q[:5])}); their judgements are dropped"
        )
    missing_d = {d for judged in qrels.values() for d in judged if d not in corpus}
    if missing_d:
        n_j = sum(1 for judged in qrels.values() for d in judged if d in missing_d)
        issues.append(
            f"{n_j} judgements name {len(missing_d)} documents not in corpus.jsonl "
            f"(e.g. {', '.join(sorted(missing_d)[:5])}); they count as never retrieved"
        )
    if issues and strict:
        raise InvalidInputError(f"{root}: inconsistent BEIR folder (split {split!r}):\n  " + "\n  ".join(issues))
    if corpus.skipped:
        lines = ", ".join(str(s.line) for s in corpus.skipped[:10])
        more = ", ..." if len(corpus.skipped) > 10 else ""
        issues.insert(0, f"{len(corpus.skipped)} corpus line(s) skipped (lines {lines}{more})")
    for msg in issues:
        warnings.warn(f"{root.name}/{split}: {msg}", BeirConsistencyWarning, stacklevel=2)
    qrels = {q: judged for q, judged in qrels.items() if q in all_queries}
    if not qrels:
        raise InvalidInputError(f"{root}: none of the judged queries of split {split!r} is in queries.jsonl")
    queries = {q: t for q, t in all_queries.items() if q in qrels}
    return BeirDataset(corpus, queries, qrels, name=root.name, folder=str(root), split=split, issues=issues)


def _data_dirs(data_dir: str | Path | None) -> list[Path]:
    dirs = [Path(data_dir)] if data_dir else []
    dirs += [Path(d) for d in os.environ.get(DATA_ENV, "").split(os.pathsep) if d]
    return dirs


def _is_beir_folder(p: Path) -> bool:
    return (p / "corpus.jsonl").is_file() and (p / "queries.jsonl").is_file()


def download_dir() -> Path:
    """Where ``download=True`` puts datasets when neither ``data_dir`` nor ``$ALIGNIR_DATA`` says:
    ``$ALIGNIR_CACHE/beir`` (default ``~/.cache/alignir/beir``)."""
    cache = os.environ.get("ALIGNIR_CACHE")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache" / "alignir") / "beir"


def resolve_dataset(name_or_path: str | Path, data_dir: str | Path | None = None, download: bool = False) -> Path:
    """Find a BEIR folder: an existing path, else ``NAME`` under ``data_dir`` or any folder in
    ``$ALIGNIR_DATA`` (os.pathsep-separated); else, with ``download=True``, fetch the
    standard BEIR zip (:func:`download_beir`) into ``data_dir``, the first ``$ALIGNIR_DATA``
    folder, or :func:`download_dir`."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not _is_beir_folder(p):
            raise FileNotFoundError(f"{p} is not a BEIR folder (needs corpus.jsonl and queries.jsonl)")
        return p
    name = str(name_or_path)
    looked = []
    for d in _data_dirs(data_dir):
        cand = d / name
        looked.append(str(cand))
        if _is_beir_folder(cand):
            return cand
    if download and "/" not in name and os.sep not in name:
        dirs = _data_dirs(data_dir)
        return download_beir(name, dirs[0] if dirs else download_dir())
    raise FileNotFoundError(
        f"BEIR dataset {name!r} not found: not a folder"
        + (f", and not in {', '.join(looked)}" if looked else f"; set ${DATA_ENV} to the folder holding it")
        + ("" if download else " (download=True / --download fetches the standard BEIR zip)")
    )


def beir_url(name: str, base: str | None = None) -> str:
    """The zip URL of BEIR dataset ``name``: ``{base}/{name}.zip`` with ``base`` from the
    argument, else ``$ALIGNIR_BEIR_URL`` (a mirror), else BEIR's own host."""
    base = base or os.environ.get(URL_ENV) or BEIR_URL.rsplit("/", 1)[0]
    return f"{base.rstrip('/')}/{name}.zip"


def _fetch(url: str, out: Path, name: str, timeout: float, progress: bool) -> tuple[int, str]:
    """Stream ``url`` into ``out``; (bytes written, md5 hex). A body shorter than the
    server's Content-Length is an error, as is any HTTP or connection failure."""
    from http.client import HTTPException

    from tqdm import tqdm

    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(out, "wb") as fh:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"download {name}", disable=not progress) as bar:
                while chunk := resp.read(1 << 20):
                    fh.write(chunk)
                    md5.update(chunk)
                    size += len(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as e:
        hint = f" (no BEIR dataset named {name!r} there?)" if e.code == 404 else ""
        raise DownloadError(f"cannot download {url}: HTTP {e.code} {e.reason}{hint}") from None
    except urllib.error.URLError as e:
        raise DownloadError(f"cannot download {url}: {e.reason} (offline? put the dataset folder in "
                            f"${DATA_ENV} or give its path)") from None
    except (HTTPException, ConnectionError, TimeoutError) as e:  # IncompleteRead, reset or timeout mid-body
        raise DownloadError(f"cannot download {url}: the transfer broke off after {size} bytes "
                            f"({type(e).__name__}: {e})") from None
    if total is not None and size != total:
        raise DownloadError(f"cannot download {url}: got {size} bytes, the server announced {total}")
    return size, md5.hexdigest()


def download_beir(name: str, target_dir: str | Path, url: str | None = None, timeout: float = 60.0,
                  md5: str | None = None, progress: bool = True) -> Path:
    """Download and unzip the standard BEIR zip of ``name`` into ``target_dir/name``.

    ``url`` defaults to :func:`beir_url`. Checks: the byte count against the server's
    Content-Length, the md5 against ``md5`` (default: BEIR's published checksum for the
    datasets in :data:`BEIR_MD5`), every member's CRC, no member escaping the folder, and a
    corpus.jsonl + queries.jsonl inside. Everything happens in a temporary folder renamed
    into place at the end, so a failed or interrupted download never leaves a half dataset.
    Failures raise :class:`DownloadError` with a one-line message.
    """
    if not name or any(c in name for c in "/\\") or name in (".", ".."):
        raise InvalidInputError(f"a BEIR dataset name is one path component, got {name!r}")
    target_dir = Path(target_dir)
    dest = target_dir / name
    if _is_beir_folder(dest):
        return dest
    target_dir.mkdir(parents=True, exist_ok=True)
    url = url or beir_url(name)
    want_md5 = (md5 or BEIR_MD5.get(name, "")).lower() or None
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target_dir))
    try:
        zpath = tmp / f"{name}.zip"
        _, got_md5 = _fetch(url, zpath, name, timeout, progress)
        if want_md5 and got_md5 != want_md5:
            raise DownloadError(f"{url}: md5 {got_md5} differs from the published {want_md5} (corrupt or altered)")
        unpacked = tmp / "unzipped"
        try:
            with zipfile.ZipFile(zpath) as zf:
                base = unpacked.resolve()
                for member in zf.namelist():
                    if not (unpacked / member).resolve().is_relative_to(base):
                        raise DownloadError(f"{url}: zip member {member!r} escapes the target folder")
                bad = zf.testzip()
                if bad is not None:
                    raise DownloadError(f"{url}: zip member {bad!r} fails its CRC check")
                zf.extractall(unpacked)
        except zipfile.BadZipFile as e:
            raise DownloadError(f"{url}: not a valid zip file ({e})") from None
        found = [c for c in [unpacked / name, unpacked] + sorted(unpacked.iterdir()) if _is_beir_folder(c)]
        if not found:
            raise DownloadError(f"{url}: the archive holds no corpus.jsonl/queries.jsonl")
        replace_dir(found[0], dest, overwrite=False)  # never deletes a folder that is not BEIR's
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
