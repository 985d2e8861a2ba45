"""The index directory: one folder holding everything a search needs, written atomically.

Layout (all paths relative to the index folder)::

    manifest.json      format, encoder fingerprint + hash, params (K, M, λ, weighting,
                       folding...), counts, dims, one entry per part (``parts``: its
                       sub-folder + what its ``describe()`` returned), sha256 + size of
                       every other file, and its own sha256
    doc_ids.parquet    column ``doc_id`` (string): row i = doc number i
    dense.npy          the encoder's vectors h [rows, d], float32 or float16 — what a
                       re-sparsify (new K/M/λ/weighting, “A Text is Worth Several Tokens” eq.14-16) starts from
    pc1.npy            the corpus first principal component u1 (“A Text is Worth Several Tokens” eq.14), optional
    sparse/            part "sparse": ``index.sparse.SparseIndex.save`` output, optional
    faiss/             part "dense": ``index.dense.DenseIndex.save`` output, optional
    lexical/           part "lexical": ``index.lexical.LexicalLeg.save`` output (BM25
                       word-term postings + vocab.json), optional
    passages/          part "passages": ``index.passages.PassageMap.save`` output (the
                       document of every row when documents are split into passages),
                       optional: without it every row is one document

Rows and documents: the dense vectors and the "row" parts (sparse, dense) hold one row per
encoded text, the "doc" parts (lexical) one entry per document (``index.parts``). They are
the same unless the index has the passages part; then ``counts["rows"]`` records the rows.
    extra/NAME.npy     any further arrays the caller stores

The store knows no part by name: it saves and loads whatever ``index.parts`` registers
(``Part``: ``save(folder)``, ``load(folder, entry, mmap=...)``, ``n_docs``, ``describe()``).
Format 1 (before parts had a protocol) named the parts in ``components`` and kept their
sizes in ``counts`` / ``dims``; such indexes open unchanged and are rewritten as format 2
by the next write.

Atomic commit: everything is written into a hidden temp folder next to the target,
checksummed, fsynced, then swapped into place — with ``renameat2(RENAME_EXCHANGE)``
where the kernel offers it (one atomic step), otherwise by renaming the old index to a
backup, the new one into place, and deleting the backup (an interrupted swap is undone
by the next ``open_index`` / write). On any failure the temp folder is removed and the
previous index is untouched. Nothing is pickled: arrays load with
``allow_pickle=False``, metadata is JSON, the table is parquet.

This module is the store's public surface; the work is done by ``index.writer`` (writing and
rewriting), ``index.reader`` (opening), ``index.manifest_io`` (the manifest: fingerprint,
sealing, format-1 upgrade, file checksums) and ``index.folder`` (file names, work folders,
recovery of an interrupted write).
"""
from __future__ import annotations

from alignir.index.manifest_io import check_fingerprint, read_manifest, verify_index
from alignir.index.reader import StoredIndex, open_index
from alignir.index.writer import replace_part, replace_parts, update_params, write_index

__all__ = ["write_index", "open_index", "StoredIndex", "read_manifest", "verify_index", "replace_part",
           "replace_parts", "update_params", "check_fingerprint"]
