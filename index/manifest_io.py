"""The manifest of an index folder (``manifest.json``): its format, the encoder fingerprint it
records, its own checksum (sealing), the upgrade of a format-1 manifest to today's shape, and
the sha256 checksums of every file it lists (:func:`verify_index`). The writer seals what it
commits; the reader and every rewrite read through :func:`read_manifest`."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping

from alignir.errors import (CorruptIndexError, FingerprintMismatch, IndexReadError, NotAnIndexError,
                            UnsupportedFormatError)
from alignir.index.folder import MANIFEST, describe_oserror, list_files, recover
from alignir.io import sha256_file

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "RESERVED", "MANIFEST_CHECKSUM", "FIRST_SEALED_VERSION",
           "fingerprint_hash", "check_fingerprint", "manifest_digest", "seal_manifest", "read_manifest",
           "verify_index"]

log = logging.getLogger(__name__)

FORMAT_NAME = "alignir-index"
FORMAT_VERSION = 2  # 2: parts under manifest["parts"]; 1 is still read
#: keys of manifest.json that the store computes; callers may not set them
RESERVED = ("format", "format_version", "created", "encoder_hash", "counts", "dims",
            "files", "components", "parts", "dense_dtype", "dense_index", "lexical", "manifest_sha256")

#: the manifest's own checksum: sha256 of its canonical JSON without this key
MANIFEST_CHECKSUM = "manifest_sha256"
#: the first format whose manifests always carry that checksum (format 1 predates it: only there
#: may it be missing)
FIRST_SEALED_VERSION = 2


def fingerprint_hash(fingerprint: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of an encoder fingerprint."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def check_fingerprint(manifest: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> None:
    """Raise :class:`FingerprintMismatch` naming every field (dotted for nested dicts)
    where the query encoder's ``fingerprint`` differs from ``manifest["encoder"]``."""
    stored = manifest.get("encoder")
    if not isinstance(stored, Mapping):
        raise CorruptIndexError("the manifest has no encoder fingerprint")
    # JSON round trip so tuples/lists and int/float spellings compare as stored
    query = json.loads(json.dumps(fingerprint, sort_keys=True))
    if fingerprint_hash(stored) == fingerprint_hash(query):
        return
    a, b = _flatten(stored), _flatten(query)
    missing = object()
    diffs = {k: (a.get(k, "<absent>"), b.get(k, "<absent>"))
             for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)}
    raise FingerprintMismatch(diffs or {"<structure>": (stored, query)})


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical form (sorted keys, no spaces, without its checksum)."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def seal_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` with its own checksum (what :func:`read_manifest` verifies)."""
    return {**{k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM},
            MANIFEST_CHECKSUM: manifest_digest(manifest)}


def _paths_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for v in node.values():
            yield from _paths_in(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _paths_in(v)


def _check_inside(path: Path, mpath: Path, manifest: Mapping[str, Any]) -> None:
    """Every file, component and part path of the manifest must stay inside the index folder."""
    root = path.resolve()
    part_dirs = [e.get("path") for e in manifest["parts"].values()]
    for rel in [*manifest["files"], *_paths_in(manifest["components"]), *part_dirs]:
        if not isinstance(rel, str) or not rel:
            raise CorruptIndexError(f"{mpath}: invalid path {rel!r}; the manifest is corrupt")
        target = (path / rel).resolve()
        if Path(rel).is_absolute() or (target != root and root not in target.parents):
            raise CorruptIndexError(f"{mpath}: the path {rel!r} points outside the index folder; "
                                    f"the manifest is corrupt or was tampered with")


#: format 1 named each part by hand: components key -> (part name, its manifest entry)
def _v1_parts(m: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    comps, counts, dims = m["components"], m["counts"], m["dims"]
    found = {
        "sparse": ("sparse", {"n_terms": dims.get("sparse_terms"), "n_postings": counts.get("sparse_postings")}),
        "faiss": ("dense", {"kind": (m.get("dense_index") or {}).get("kind"), "dim": dims.get("faiss"),
                            "n_live": counts.get("dense_live")}),
        "lexical": ("lexical", {"params": m.get("lexical") or {}, "n_terms": dims.get("lexical_terms"),
                                "n_postings": counts.get("lexical_postings")}),
    }
    return {name: {"path": comps[key], **{k: v for k, v in entry.items() if v is not None}}
            for key, (name, entry) in found.items() if key in comps}


def _upgrade_v1(m: dict[str, Any]) -> dict[str, Any]:
    """A format-1 manifest in today's shape (parts under ``manifest["parts"]``); on disk it
    stays as written until the next write of the index."""
    out = {k: v for k, v in m.items() if k not in ("lexical", "dense_index")}
    out["parts"] = _v1_parts(m)
    out["components"] = {k: v for k, v in m["components"].items() if k not in ("sparse", "faiss", "lexical")}
    out["counts"] = {k: v for k, v in m["counts"].items() if k == "docs"}
    out["dims"] = {k: v for k, v in m["dims"].items() if k == "dense"}
    return out


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and validate ``manifest.json`` (format name and version, its own checksum), not the
    files' checksums. A format-1 manifest is returned in today's shape (see ``_upgrade_v1``)."""
    path = Path(path)
    if not path.exists():
        recover(path)
    if not path.exists():
        raise NotAnIndexError(f"no index at {path}: the folder does not exist")
    if not path.is_dir():
        raise NotAnIndexError(f"{path} is a file, not an index folder")
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise NotAnIndexError(f"{path} is not an alignir index (no {MANIFEST})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except OSError as e:
        raise IndexReadError(e.errno, f"cannot read {mpath}: {describe_oserror(e)}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptIndexError(f"{mpath} is not valid JSON ({e}); the index is corrupt") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise NotAnIndexError(f"{mpath} is not an alignir index manifest (format != {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptIndexError(f"{mpath}: invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{path} uses index format {version}, newer than this alignir supports "
            f"({FORMAT_VERSION}); upgrade alignir to open it")
    stored_digest = manifest.get(MANIFEST_CHECKSUM)
    if stored_digest is None and version >= FIRST_SEALED_VERSION:
        raise CorruptIndexError(f"{mpath} lacks its own checksum ({MANIFEST_CHECKSUM!r}), which every format-{version} "
                                f"manifest carries: it was edited or damaged; the index is corrupt (restore the "
                                f"manifest, or rebuild the index)")
    if stored_digest is None:
        log.warning("%s has no checksum of its own (format 1, written by an older alignir); re-sparsify to add one",
                    mpath)
    elif stored_digest != manifest_digest(manifest):
        raise CorruptIndexError(f"{mpath} fails its own checksum: it was edited or damaged; the index is corrupt "
                                f"(restore the manifest, or rebuild the index)")
    for key in ("encoder", "files", "components", "counts", "dims") + (("parts",) if version >= 2 else ()):
        if not isinstance(manifest.get(key), dict):
            raise CorruptIndexError(f"{mpath}: missing or invalid {key!r}")
    if version == 1:
        manifest = _upgrade_v1(manifest)
    if not all(isinstance(e, dict) for e in manifest["parts"].values()):
        raise CorruptIndexError(f"{mpath}: invalid part entry")
    _check_inside(path, mpath, manifest)
    return manifest


def verify_index(path: str | Path, manifest: Mapping[str, Any] | None = None) -> None:
    """Check that every file listed in the manifest exists with its size and sha256,
    and that no unlisted file is present. Raises :class:`CorruptIndexError`."""
    path = Path(path)
    manifest = manifest if manifest is not None else read_manifest(path)
    listed = manifest["files"]
    try:
        _verify_files(path, listed)
    except PermissionError as e:
        raise IndexReadError(e.errno, f"cannot read index {path}: {describe_oserror(e)} "
                                      f"[{e.filename}]") from e


def _verify_files(path: Path, listed: Mapping[str, Any]) -> None:
    for rel, info in listed.items():
        p = path / rel
        if not p.is_file():
            raise CorruptIndexError(f"{path}: file {rel} is missing; the index is corrupt, rebuild it")
        if p.stat().st_size != info.get("bytes"):
            raise CorruptIndexError(f"{path}: file {rel} has {p.stat().st_size} bytes, the manifest "
                                    f"says {info.get('bytes')}; the index is corrupt, rebuild it")
        if sha256_file(p) != info.get("sha256"):
            raise CorruptIndexError(f"{path}: checksum mismatch for {rel}; the index is corrupt, rebuild it")
    extra = [rel for rel in list_files(path) if rel != MANIFEST and rel not in listed
             and not Path(rel).name.startswith(".")]
    if extra:
        raise CorruptIndexError(f"{path}: files not listed in the manifest: {extra[:5]}")
