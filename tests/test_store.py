"""Index directory: round trips, checksums, refusals, atomic replacement under SIGKILL,
permission and file-size errors leaving the previous index intact."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import alignir.index.manifest_io as manifest_io
import alignir.index.reader as reader
import alignir.index.writer as writer
from alignir.index.dense import DenseIndex
from alignir.index.sparse import SparseIndex
from alignir.index.store import check_fingerprint, open_index, replace_part, write_index
from alignir.errors import (CorruptIndexError, FingerprintMismatch, IndexChangedError, IndexWriteError, NotAnIndexError,
                            UnsupportedFormatError)

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(3)
N, D, V = 120, 16, 300
VECS = RNG.standard_normal((N, D)).astype(np.float32)
CSR = sp.random(N, V, density=0.05, format="csr", dtype=np.float32, random_state=3)
IDS = [f"doc-{i}" for i in range(N)]
FP = {"model": "smollm2-135m", "revision": "abc123", "embedder": "prompteol",
      "pooling": {"kind": "last", "layer": -1}, "template": 'This sentence: "{text}"'}
MANIFEST = {"encoder": FP, "params": {"K": 32, "M": 8, "lambda": 0.0, "weighting": "raw"}}
QCSR = sp.random(4, V, density=0.05, format="csr", dtype=np.float32, random_state=4)


def build(path: Path, ids=IDS, vecs=VECS, sparse=None, **kw) -> Path:
    kw.setdefault("parts", {"sparse": sparse or SparseIndex.from_csr(CSR),
                            "dense": DenseIndex.build(vecs, center=True)})
    return write_index(path, MANIFEST, ids, vecs, **kw)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def leftovers(parent: Path, name: str) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


# ---------------------------------------------------------------------------------
# round trips


def test_round_trip_of_every_part(tmp_path):
    pc1 = RNG.standard_normal(D).astype(np.float32)
    extra = {"doc_len": np.arange(N, dtype=np.int32)}
    path = build(tmp_path / "idx", pc1=pc1, extra_arrays=extra)
    st = open_index(path)
    assert st.doc_ids == IDS and st.n_docs == N
    np.testing.assert_array_equal(st.dense_vectors, VECS)
    assert isinstance(st.dense_vectors, np.memmap)
    np.testing.assert_array_equal(st.pc1, pc1)
    np.testing.assert_array_equal(st.extra["doc_len"], extra["doc_len"])
    ref = SparseIndex.from_csr(CSR).search(QCSR, 10)
    got = st.sparse.search(QCSR, 10)
    np.testing.assert_array_equal(ref[0], got[0])
    np.testing.assert_array_equal(ref[1], got[1])
    dref = DenseIndex.build(VECS, center=True).search(VECS[:5], 10)
    dgot = st.dense.search(VECS[:5], 10)
    np.testing.assert_array_equal(dref[0], dgot[0])
    m = st.manifest
    assert m["format"] == "alignir-index" and m["format_version"] == manifest_io.FORMAT_VERSION
    assert m["encoder"] == FP and m["params"] == MANIFEST["params"]
    assert m["encoder_hash"] == manifest_io.fingerprint_hash(FP)
    assert m["counts"] == {"docs": N} and m["dims"] == {"dense": D}
    assert m["parts"]["sparse"] == {"path": "sparse", "n_docs": N, "n_terms": V, "n_postings": CSR.nnz,
                                    "n_segments": 1, "quantize": None}
    assert m["parts"]["dense"]["path"] == "faiss" and m["parts"]["dense"]["kind"] == "flat"
    assert m["parts"]["dense"]["dim"] == D and m["parts"]["dense"]["n_live"] == N
    assert m["dense_dtype"] == "float32"
    on_disk = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert sorted(m["files"]) == [f for f in on_disk if f != "manifest.json"]
    for rel, info in m["files"].items():
        assert info["sha256"] == sha(path / rel) and info["bytes"] == (path / rel).stat().st_size
    assert leftovers(tmp_path, "idx") == []
    np.testing.assert_array_equal(st.doc_numbers(["doc-7", "doc-0"]), [7, 0])
    with pytest.raises(ValueError, match="unknown document id"):
        st.doc_numbers(["nope"])


def test_float16_vectors_and_dense_only_index(tmp_path):
    path = write_index(tmp_path / "idx", MANIFEST, IDS, VECS, dense_dtype="float16")
    st = open_index(path)
    assert st.dense_vectors.dtype == np.float16 and st.sparse is None and st.dense is None
    np.testing.assert_allclose(st.dense_vectors.astype(np.float32), VECS, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="float16 range"):
        write_index(tmp_path / "j", MANIFEST, IDS, VECS * 1e5, dense_dtype="float16")


def test_rewrite_replaces_the_old_index(tmp_path):
    build(tmp_path / "idx")
    new_ids = [f"new-{i}" for i in range(N)]
    build(tmp_path / "idx", ids=new_ids)
    assert open_index(tmp_path / "idx").doc_ids == new_ids
    assert leftovers(tmp_path, "idx") == []


@pytest.mark.e2e  # a child Python process (a pid that is gone)
def test_two_rename_swap_and_recovery_of_an_interrupted_swap(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "USE_RENAME_EXCHANGE", False)
    build(tmp_path / "idx")
    build(tmp_path / "idx", ids=[f"n{i}" for i in range(N)])
    assert open_index(tmp_path / "idx").doc_ids[0] == "n0"
    assert leftovers(tmp_path, "idx") == []
    # the state a crash between the two renames leaves: only the backup of a dead writer
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.rename(tmp_path / "idx", tmp_path / f".idx.old-{dead}-x1")
    (tmp_path / f".idx.tmp-{dead}-x2").mkdir()  # and a half-written new one
    st = open_index(tmp_path / "idx")
    assert st.doc_ids[0] == "n0"
    assert leftovers(tmp_path, "idx") == []


# ---------------------------------------------------------------------------------
# refusals


def test_not_an_index_is_refused(tmp_path):
    with pytest.raises(NotAnIndexError, match="does not exist"):
        open_index(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAnIndexError, match="not an index folder"):
        open_index(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAnIndexError, match="no manifest.json"):
        open_index(tmp_path / "empty")
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"name": "some other tool"}))
    with pytest.raises(NotAnIndexError, match="not an alignir index manifest"):
        open_index(other)


def test_writer_refuses_to_replace_a_folder_that_is_not_an_index(tmp_path):
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "thesis.tex").write_text("do not delete")
    with pytest.raises(NotAnIndexError, match="refusing to replace"):
        build(precious)
    assert (precious / "thesis.tex").read_text() == "do not delete"
    assert leftovers(tmp_path, "data") == []
    (tmp_path / "empty").mkdir()
    build(tmp_path / "empty")  # an empty folder is fine
    assert open_index(tmp_path / "empty").n_docs == N


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "add", "manifest"])
def test_corruption_is_detected(tmp_path, damage):
    path = build(tmp_path / "idx")
    target = path / "dense.npy"
    if damage == "flip":
        b = bytearray(target.read_bytes())
        b[-7] ^= 0x01
        target.write_bytes(bytes(b))
        msg = "checksum mismatch for dense.npy"
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-4])
        msg = "dense.npy has"
    elif damage == "delete":
        next((path / "sparse").iterdir()).unlink()
        msg = "is missing"
    elif damage == "add":
        (path / "faiss" / "rogue.npy").write_bytes(b"x")
        msg = "not listed"
    else:
        (path / "manifest.json").write_text((path / "manifest.json").read_text()[:50])
        msg = "not valid JSON"
    with pytest.raises(CorruptIndexError, match=msg):
        open_index(path)


def test_newer_format_is_refused(tmp_path):
    path = build(tmp_path / "idx")
    m = json.loads((path / "manifest.json").read_text())
    m["format_version"] = manifest_io.FORMAT_VERSION + 1
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UnsupportedFormatError, match="newer than this alignir supports"):
        open_index(path)


def test_inconsistent_inputs_are_refused_before_writing(tmp_path):
    target = tmp_path / "idx"
    with pytest.raises(ValueError, match="duplicate document id 'doc-1'"):
        build(target, ids=IDS[:-1] + ["doc-1"])
    with pytest.raises(ValueError, match="dense_vectors must be"):
        write_index(target, MANIFEST, IDS, VECS[:-1])
    with pytest.raises(ValueError, match="part 'sparse' holds 119"):
        build(target, sparse=SparseIndex.from_csr(CSR[:-1]))
    with pytest.raises(ValueError, match="computed by the store"):
        write_index(target, {**MANIFEST, "files": {}}, IDS, VECS)
    with pytest.raises(ValueError, match="encoder fingerprint"):
        write_index(target, {"params": {}}, IDS, VECS)
    with pytest.raises(ValueError, match="invalid array name"):
        write_index(target, MANIFEST, IDS, VECS, extra_arrays={"../x": VECS})
    with pytest.raises(ValueError, match="0 documents"):
        write_index(target, MANIFEST, [], VECS[:0])
    assert not target.exists() and leftovers(tmp_path, "idx") == []


# ---------------------------------------------------------------------------------
# fingerprints


def test_fingerprint_check_names_the_differing_fields(tmp_path):
    st = open_index(build(tmp_path / "idx"))
    st.check_fingerprint(json.loads(json.dumps(FP)))  # identical: accepted
    other = {**FP, "revision": "def456", "pooling": {"kind": "mean", "layer": -1}}
    other.pop("template")
    with pytest.raises(FingerprintMismatch) as err:
        check_fingerprint(st.manifest, other)
    assert set(err.value.differences) == {"revision", "pooling.kind", "template"}
    text = str(err.value)
    assert "revision: index='abc123', query encoder='def456'" in text
    assert "pooling.kind" in text and "template: index=" in text


# ---------------------------------------------------------------------------------
# re-sparsify


def test_replace_part_swaps_only_the_sparse_part(tmp_path):
    path = build(tmp_path / "idx", pc1=np.ones(D, dtype=np.float32),
                 extra_arrays={"term_strings": np.array(["a", "b"]), "keep": np.arange(3)})
    before = json.loads((path / "manifest.json").read_text())
    new_csr = sp.random(N, 50, density=0.1, format="csr", dtype=np.float32, random_state=9)
    new_pc1 = np.full(D, 2.0, dtype=np.float32)
    replace_part(path, "sparse", SparseIndex.from_csr(new_csr), params={"K": 8, "lambda": 0.5}, pc1=new_pc1,
                 extra_arrays={"term_strings": np.array(["x", "yy", "z"])})
    st = open_index(path)
    assert st.extra["term_strings"].tolist() == ["x", "yy", "z"]
    np.testing.assert_array_equal(st.extra["keep"], np.arange(3))
    assert st.params == {"K": 8, "M": 8, "lambda": 0.5, "weighting": "raw"}
    assert st.sparse.n_terms == 50 and st.manifest["parts"]["sparse"]["n_terms"] == 50
    np.testing.assert_array_equal(st.pc1, new_pc1)
    q = sp.random(3, 50, density=0.2, format="csr", dtype=np.float32, random_state=1)
    np.testing.assert_array_equal(st.sparse.search(q, 5)[0], SparseIndex.from_csr(new_csr).search(q, 5)[0])
    after = st.manifest["files"]
    for rel in ("dense.npy", "doc_ids.parquet", "faiss/index.faiss", "extra/keep.npy"):
        assert after[rel] == before["files"][rel]
    assert not any(r.startswith("sparse/") and r in before["files"] and after[r] == before["files"][r]
                   for r in after if r.endswith("weights.npy"))
    assert leftovers(tmp_path, "idx") == []
    with pytest.raises(ValueError, match="holds 10 documents"):
        replace_part(path, "sparse", SparseIndex.from_csr(new_csr[:10]))


# ---------------------------------------------------------------------------------
# crashes and I/O errors (real subprocesses, real kernel errors)

WRITER = """
import sys, numpy as np
from alignir.index.store import write_index
from alignir.errors import IndexWriteError
from alignir.index.dense import DenseIndex
n, d = {n}, {d}
vecs = np.random.default_rng(0).standard_normal((n, d), dtype=np.float32)
ids = ["big-%d" % i for i in range(n)]
dense = DenseIndex.build(vecs)
{pre}
try:
    write_index({path!r}, {{"encoder": {{"model": "big"}}}}, ids, vecs, parts={{"dense": dense}})
except IndexWriteError as e:
    print("ERR", e.errno, e)
    sys.exit(3)
print("DONE")
"""


def _writer(path: Path, n: int, d: int, pre: str = "") -> list[str]:
    return [sys.executable, "-c", WRITER.format(root=str(ROOT), n=n, d=d, path=str(path), pre=pre)]


@pytest.mark.e2e  # writers killed in child processes
def test_sigkill_mid_write_leaves_the_previous_index_intact(tmp_path):
    path = build(tmp_path / "idx")
    old_manifest = (path / "manifest.json").read_text()
    killed_mid_write = 0
    for delay in (0.0, 0.1, 0.4, 5.0):
        # ~30 MB of vectors + ~30 MB of faiss index
        proc = subprocess.Popen(_writer(path, 30_000, 256), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        mine = f".idx.tmp-{proc.pid}-"
        t_end = time.time() + 120
        while (not any(n.startswith(mine) for n in leftovers(tmp_path, "idx"))
               and proc.poll() is None and time.time() < t_end):
            time.sleep(0.001)  # until this writer has started its temp folder
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        st = open_index(path)  # whatever happened, path holds one complete, verified index
        if "DONE" in out or st.doc_ids[0] == "big-0":
            assert st.doc_ids[0] == "big-0" and st.n_docs == 30_000
            break  # the new index landed whole; later kills would only test that again
        assert (path / "manifest.json").read_text() == old_manifest
        assert st.doc_ids == IDS
        assert any(n.startswith(mine) for n in leftovers(tmp_path, "idx"))  # killed mid-write
        killed_mid_write += 1
    assert killed_mid_write >= 1
    build(path)  # the next writer clears the dead writers' temp folders
    assert leftovers(tmp_path, "idx") == []


@pytest.mark.e2e  # a writer in a child process
def test_permission_error_is_clear_and_changes_nothing():
    base = Path(tempfile.mkdtemp(prefix="alignir-perm-"))
    try:
        os.chmod(base, 0o755)
        path = build(base / "idx")
        old = (path / "manifest.json").read_text()
        if os.geteuid() == 0:  # root ignores modes: write as "nobody" after the imports
            pre = "import os; os.setgid(65534); os.setuid(65534)"
        else:
            os.chmod(base, 0o555)
            pre = ""
        res = subprocess.run(_writer(path, 50, 8, pre), capture_output=True, text=True)
        assert res.returncode == 3, res.stderr
        assert "ERR" in res.stdout, res.stderr
        assert "permission denied" in res.stdout and "previous index is intact" in res.stdout
        os.chmod(base, 0o755)
        assert (path / "manifest.json").read_text() == old
        assert open_index(path).doc_ids == IDS
        assert leftovers(base, "idx") == []
    finally:
        os.chmod(base, 0o755)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.e2e  # a writer in a child process
def test_file_size_limit_mid_write_is_clear_and_leaves_no_partial_index(tmp_path):
    """RLIMIT_FSIZE makes the kernel fail a write part-way (EFBIG), as a full disk would."""
    path = build(tmp_path / "idx")
    old = (path / "manifest.json").read_text()
    pre = ("import resource, signal\n"
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))")
    res = subprocess.run(_writer(path, 2000, 256, pre), capture_output=True, text=True)
    assert res.returncode == 3, res.stderr
    assert "file too large" in res.stdout and "previous index is intact" in res.stdout
    assert (path / "manifest.json").read_text() == old
    assert open_index(path).doc_ids == IDS
    assert leftovers(tmp_path, "idx") == []


class _Payload:
    """Unpickling this would create a marker file: the store must never unpickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("mmap", [False, True])
def test_a_pickled_array_planted_in_an_index_is_never_loaded(tmp_path, mmap):
    path = build(tmp_path / "idx")
    marker = tmp_path / "pwned"
    evil = np.empty(N, dtype=object)
    evil[:] = [_Payload(str(marker))] * N
    np.save(path / "dense.npy", evil, allow_pickle=True)
    m = json.loads((path / "manifest.json").read_text())  # a consistent manifest, as an attacker would
    m["files"]["dense.npy"] = {"sha256": sha(path / "dense.npy"), "bytes": (path / "dense.npy").stat().st_size}
    (path / "manifest.json").write_text(json.dumps(manifest_io.seal_manifest(m)))  # checksum recomputed too
    with pytest.raises(CorruptIndexError, match="cannot read"):
        open_index(path, mmap=mmap)
    assert not marker.exists()


def test_a_symlinked_index_is_written_through_to_its_target(tmp_path):
    """Writes go to the link's target; the link stays a link and no temp junk is left."""
    target = build(tmp_path / "target")
    link = tmp_path / "link"
    link.symlink_to(target)
    new_csr = sp.random(N, 50, density=0.1, format="csr", dtype=np.float32, random_state=9)
    replace_part(link, "sparse", SparseIndex.from_csr(new_csr), params={"K": 8})
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert open_index(target).params["K"] == 8 and open_index(link).params["K"] == 8
    assert leftovers(tmp_path, "link") == [] and leftovers(tmp_path, "target") == []
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "to-empty").symlink_to(empty)
    build(tmp_path / "to-empty")  # building over a link to an empty folder fills the target
    assert open_index(empty).doc_ids == IDS and (tmp_path / "to-empty").is_symlink()


def test_a_read_only_index_is_refused_for_writes(tmp_path):
    path = build(tmp_path / "idx")
    before = {p.name: sha(p) for p in path.iterdir() if p.is_file()}
    modes = {}
    for p in [path, *path.rglob("*")]:
        modes[p] = p.stat().st_mode
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        with pytest.raises(IndexWriteError, match="read-only"):
            replace_part(path, "sparse", SparseIndex.from_csr(CSR), params={"K": 8})
    finally:
        for p, m in sorted(modes.items(), key=lambda kv: len(kv[0].parts)):
            p.chmod(m)
    assert {p.name: sha(p) for p in path.iterdir() if p.is_file()} == before
    assert leftovers(tmp_path, "idx") == []


def test_a_swap_is_refused_when_the_index_changed_since_it_was_read(tmp_path):
    """The generation check: a writer that read the index before another writer's swap must not
    swap in a version built from the old snapshot (it would silently undo the other change)."""
    path = build(tmp_path / "idx")
    snapshot = open_index(path).manifest
    replace_part(path, "sparse", SparseIndex.from_csr(CSR), params={"K": 64}, expected=snapshot)  # first writer
    before = json.loads((path / "manifest.json").read_text())
    with pytest.raises(IndexChangedError, match="changed while"):
        replace_part(path, "sparse", SparseIndex.from_csr(CSR), params={"K": 100}, expected=snapshot)  # second, stale
    assert json.loads((path / "manifest.json").read_text()) == before
    assert leftovers(tmp_path, "idx") == []


@pytest.mark.parametrize("edit", ["query_m", "lambda_digit", "key_name"])
def test_an_edited_manifest_fails_its_own_checksum(tmp_path, edit):
    """Editing a parameter of manifest.json (which changed rankings silently before) is caught."""
    path = build(tmp_path / "idx")
    mf = path / "manifest.json"
    text = mf.read_text()
    edited = {"query_m": text.replace('"M": 8', '"M": 7'), "lambda_digit": text.replace('"lambda": 0.0', '"lambda": 0.5'),
              "key_name": text.replace('"weighting"', '"weightinG"')}[edit]
    assert edited != text
    mf.write_text(edited)
    with pytest.raises(CorruptIndexError, match="fails its own checksum"):
        open_index(path)


def test_a_manifest_path_outside_the_index_is_refused(tmp_path):
    path = build(tmp_path / "idx")
    m = json.loads((path / "manifest.json").read_text())
    m["components"]["pc1"] = "../../etc/passwd"
    (path / "manifest.json").write_text(json.dumps(manifest_io.seal_manifest(m)))
    with pytest.raises(CorruptIndexError, match="outside the index folder"):
        open_index(path)


def test_a_format1_manifest_without_its_checksum_opens_with_a_warning(tmp_path, caplog):
    """Format 1 predates the manifest checksum: such a manifest opens (with a warning), and the
    next write adds the checksum."""
    path = shutil.copytree(FORMAT1 / "index", tmp_path / "idx")
    m = json.loads((path / "manifest.json").read_text())
    del m["manifest_sha256"]
    (path / "manifest.json").write_text(json.dumps(m))
    with caplog.at_level("WARNING"):
        st = open_index(path)
    assert "no checksum" in caplog.text
    replace_part(path, "lexical", st.lexical)
    assert "manifest_sha256" in json.loads((path / "manifest.json").read_text())


def test_a_sealed_format_without_its_checksum_is_corrupt(tmp_path):
    """Every format-2 manifest carries its checksum: deleting it (to hide an edit) is refused."""
    path = build(tmp_path / "idx")
    m = json.loads((path / "manifest.json").read_text())
    del m["manifest_sha256"]
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CorruptIndexError, match="lacks its own checksum"):
        open_index(path)


def test_an_open_racing_a_swap_opens_the_new_version(tmp_path, monkeypatch):
    """A reader that read the old manifest while a writer swapped the index in must not call the
    healthy index corrupt: it notices the manifest changed and opens the new version."""
    path = build(tmp_path / "idx")
    real_verify = manifest_io.verify_index
    calls = []

    def swap_then_verify(p, manifest=None):
        calls.append(p)
        if len(calls) == 1:  # the first reader's verification runs right after a writer's swap
            new_csr = sp.random(N, 50, density=0.1, format="csr", dtype=np.float32, random_state=9)
            replace_part(path, "sparse", SparseIndex.from_csr(new_csr), params={"K": 8})
        return real_verify(p, manifest)

    for module in (reader, writer):  # each verifies through the name it imported
        monkeypatch.setattr(module, "verify_index", swap_then_verify)
    st = open_index(path)
    assert st.params["K"] == 8 and len(calls) == 3  # stale read (fails) + the writer's own + a fresh read
    for module in (reader, writer):
        monkeypatch.setattr(module, "verify_index", real_verify)
    (path / "dense.npy").write_bytes(b"garbage")  # a really damaged index is still reported
    with pytest.raises(CorruptIndexError):
        open_index(path)


# ---------------------------------------------------------------------------------
# parts


def _mapped_ranges(file: Path) -> list[tuple[int, int]]:
    """Address ranges where this process has ``file`` memory-mapped (/proc/self/maps)."""
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(" " + str(file)):
            lo, hi = line.split()[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps (Linux)")
def test_open_index_memory_maps_the_dense_part(tmp_path):
    """open_index(mmap=True) hands mmap to the FAISS part: its vectors are read in place from
    faiss/index.faiss (the same pages as the file), not copied into memory."""
    path = build(tmp_path / "idx")
    faiss_file = (path / "faiss" / "index.faiss").resolve()
    st = open_index(path, mmap=False)
    assert not st.dense.read_only and _mapped_ranges(faiss_file) == []
    want = st.dense.search(VECS[:5], 10)
    del st
    st = open_index(path, mmap=True)
    assert st.dense.read_only
    ranges = _mapped_ranges(faiss_file)
    view = st.dense.vectors()
    address = view.__array_interface__["data"][0]
    assert any(lo <= address and address + view.nbytes <= hi for lo, hi in ranges), ranges
    got = st.dense.search(VECS[:5], 10)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="read-only"):
        st.dense.add(VECS[:1])


FORMAT1 = ROOT / "tests" / "data" / "index_format1"


def test_a_format1_index_written_by_main_opens_and_searches_the_same(tmp_path):
    """tests/data/index_format1 was written by alignir before parts (format 1: parts named in
    ``components``, sizes in ``counts``/``dims``, lexical parameters in ``manifest["lexical"]``,
    a manifest with checksums inside sparse/): it opens, every part returns what the old code
    returned, and the next write turns it into today's format."""
    path = shutil.copytree(FORMAT1 / "index", tmp_path / "idx")
    want = json.loads((FORMAT1 / "expected.json").read_text())
    on_disk = json.loads((path / "manifest.json").read_text())
    assert on_disk["format_version"] == 1 and "parts" not in on_disk

    def check(st):
        queries = {"sparse": sp.csr_matrix(np.array(want["q_sparse"], np.float32)),
                   "dense": np.array(want["q_dense"], np.float32),
                   "lexical": sp.csr_matrix(np.array(want["q_lexical"], np.float32))}
        for name, part in (("sparse", st.sparse), ("dense", st.dense), ("lexical", st.lexical.index)):
            docs, scores = part.search(queries[name], 5)
            assert docs.tolist() == want[name]["docs"] and scores.tolist() == want[name]["scores"], name

    st = open_index(path)
    m = st.manifest
    assert sorted(m["parts"]) == ["dense", "lexical", "sparse"]
    assert m["parts"]["dense"]["path"] == "faiss" and m["parts"]["dense"]["kind"] == "flat"
    assert m["parts"]["lexical"]["params"]["k1"] == 0.9 == st.lexical.params["k1"]
    assert m["parts"]["sparse"]["n_postings"] == on_disk["counts"]["sparse_postings"] == st.sparse.n_postings
    assert st.sparse.quantize == "uint16" and st.dense.read_only
    check(st)
    replace_part(path, "lexical", st.lexical)  # carried over by a write: now format 2
    upgraded = json.loads((path / "manifest.json").read_text())
    assert upgraded["format_version"] == manifest_io.FORMAT_VERSION and "lexical" not in upgraded
    assert upgraded["parts"]["sparse"] == m["parts"]["sparse"]
    assert (path / "sparse" / "manifest.json").is_file()  # the old sparse folder is carried as it was
    check(open_index(path))


class DocLengths:
    """A toy part (one int32 per document), to show that a new part needs no change to the store."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths

    @property
    def n_docs(self) -> int:
        return len(self.lengths)

    def save(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        np.save(Path(folder) / "lengths.npy", self.lengths)

    @classmethod
    def load(cls, folder: Path, entry=None, *, mmap: bool = True) -> "DocLengths":
        assert entry["unit"] == "tokens"
        return cls(np.load(Path(folder) / "lengths.npy", mmap_mode="r" if mmap else None))

    def describe(self) -> dict:
        return {"unit": "tokens", "total": int(self.lengths.sum())}


@pytest.fixture()
def doc_lengths_part():
    from alignir.index.parts import Part, register_part, unregister_part

    assert isinstance(DocLengths(np.zeros(1)), Part)
    register_part("doclen", DocLengths, "doc_lengths")
    yield
    unregister_part("doclen")


def test_a_new_part_is_stored_without_editing_the_store(tmp_path, doc_lengths_part):
    lengths = np.arange(N, dtype=np.int32)
    path = build(tmp_path / "idx", parts={"sparse": SparseIndex.from_csr(CSR), "doclen": DocLengths(lengths)})
    st = open_index(path)
    assert st.manifest["parts"]["doclen"] == {"path": "doc_lengths", "unit": "tokens", "total": int(lengths.sum())}
    assert isinstance(st.parts["doclen"].lengths, np.memmap)
    np.testing.assert_array_equal(st.parts["doclen"].lengths, lengths)
    assert "doc_lengths/lengths.npy" in st.manifest["files"]
    replace_part(path, "doclen", DocLengths(lengths * 2))
    st = open_index(path)
    np.testing.assert_array_equal(st.parts["doclen"].lengths, lengths * 2)
    assert st.manifest["parts"]["doclen"]["total"] == 2 * int(lengths.sum())
    np.testing.assert_array_equal(st.sparse.search(QCSR, 5)[0], SparseIndex.from_csr(CSR).search(QCSR, 5)[0])
    with pytest.raises(ValueError, match="holds 3 documents"):
        replace_part(path, "doclen", DocLengths(lengths[:3]))
    with pytest.raises(ValueError, match="unknown index part 'nope'"):
        replace_part(path, "nope", DocLengths(lengths))
    replace_part(path, "doclen", None)
    st = open_index(path)
    assert "doclen" not in st.manifest["parts"] and not (path / "doc_lengths").exists()


def test_a_part_this_alignir_does_not_know_is_a_clear_error(tmp_path, doc_lengths_part):
    from alignir.index.parts import unregister_part

    path = build(tmp_path / "idx", parts={"doclen": DocLengths(np.ones(N, np.int32))})
    unregister_part("doclen")
    with pytest.raises(UnsupportedFormatError, match="part 'doclen' that this alignir does not know"):
        open_index(path)
    assert open_index(path, parts=()).n_docs == N


def test_deprecated_spellings_still_work(tmp_path):
    with pytest.warns(DeprecationWarning, match="parts="):
        path = write_index(tmp_path / "idx", MANIFEST, IDS, VECS, sparse_index=SparseIndex.from_csr(CSR),
                           dense_index=DenseIndex.build(VECS))
    with pytest.warns(DeprecationWarning, match="parts="):
        st = open_index(path, load_dense=False)
    assert st.dense is None and st.sparse is not None
    with pytest.raises(ValueError, match="given twice"), pytest.warns(DeprecationWarning):
        write_index(tmp_path / "j", MANIFEST, IDS, VECS, parts={"sparse": SparseIndex.from_csr(CSR)},
                    sparse_index=SparseIndex.from_csr(CSR))


def test_a_filesystem_that_refuses_directory_fsync_still_commits(tmp_path, monkeypatch):
    """Some filesystems (network, FUSE) answer a directory fsync with EINVAL: the atomic rename
    is what makes a commit safe, so writing, replacing and opening an index still work."""
    import errno
    import stat

    real = os.fsync

    def refuse_directories(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd)

    monkeypatch.setattr(os, "fsync", refuse_directories)
    path = build(tmp_path / "idx")
    build(path, vecs=VECS[::-1].copy())  # replace the committed index
    assert leftovers(tmp_path, "idx") == []
    np.testing.assert_array_equal(open_index(path).dense_vectors, VECS[::-1])
