"""The readers of the unlabelled corpora (encoders/train/corpus_sources.py, corpus_markup.py) on
small inputs in each source's real format: the records they give, exactly."""
from __future__ import annotations

import gzip
import os

from alignir.encoders.train.corpus_markup import manpage, manpage_licence, roff_inline, sphinx_page
from alignir.encoders.train.corpus_sources import (SOURCES, debian_descriptions, dictd_entries, foldoc_entry,
                                                   freeciv_nation, wordnet_synsets)
from alignir.encoders.train.unsupervised import CorpusDoc

PACKAGES = """\
Package: libfoo1
Source: foo (1.2-1)
Version: 1.2-1
Description: library for reading foo files

Package: foo
Version: 1.2-1
Description: reader of foo files

Package: foo-tools
Source: foo
Version: 1.2-1
Description: tools for foo files

Package: bar
Version: 2.0-1
Description: bar baz
"""

TRANSLATION = """\
Package: libfoo1
Description-md5: 0001
Description-en: library for reading foo files
 Foo is a format for storing things.
 .
 This package contains the shared library.

Package: foo
Description-md5: 0002
Description-en: reader of foo files
 Foo is a format for storing things. It is read by:
  * the foo command line tool
  * a graphical viewer
 .
 The reader is fast.

Package: foo-tools
Description-md5: 0003
Description-en: tools for foo files
 Foo is a format for storing things.

Package: bar
Description-md5: 0004
Description-en: bar baz
 Bar does baz
 with great care.

Package: oldbar
Description-md5: 0005
Description-en: transitional package for bar
 This package can be removed.
"""


def test_debian_descriptions_one_package_per_source_with_lists_as_sentences():
    got = list(debian_descriptions([TRANSLATION], [PACKAGES]))
    assert got == [
        CorpusDoc("debian:bar", "bar baz", "Bar does baz with great care."),
        CorpusDoc("debian:foo", "reader of foo files",
                  "Foo is a format for storing things. It is read by: the foo command line tool. a graphical viewer. "
                  "The reader is fast."),
    ]


def test_debian_descriptions_without_packages_index_each_package_is_its_own_source():
    got = {d.id for d in debian_descriptions([TRANSLATION])}
    assert got == {"debian:libfoo1", "debian:foo", "debian:foo-tools", "debian:bar"}


WORDNET = """\
  1 This software and database is being provided to you, the LICENSEE, by  
  2 Princeton University under the following license.  
00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 ~ 00002137 n 0000 ~ 04424418 n 0000 | that which is perceived or known or inferred to have its own distinct existence (living or nonliving)  
00002137 03 n 02 abstraction 0 abstract_entity 0 010 @ 00001740 n 0000 | a general concept formed by extracting common features from specific examples  
00015247 00 s 02 Big(a) 0 big 1 000 | significant; "a big deal"  
"""


def test_wordnet_synsets_lemmas_and_gloss():
    got = list(wordnet_synsets(WORDNET, "n"))
    assert got == [
        CorpusDoc("wordnet:n00001740", "entity",
                  "that which is perceived or known or inferred to have its own distinct existence (living or nonliving)"),
        CorpusDoc("wordnet:n00002137", "abstraction, abstract entity",
                  "a general concept formed by extracting common features from specific examples"),
        CorpusDoc("wordnet:n00015247", "Big", 'significant; "a big deal"'),
    ]


MANPAGE = r""".\" Copyright (c) 1990 The Regents
.\" SPDX-License-Identifier: BSD-4-Clause-UC
.TH fopen 3 2023-02-05 "Linux man-pages 6.03"
.SH NAME
fopen, fdopen \- stream open functions
.SH SYNOPSIS
.nf
.B #include <stdio.h>
.BI "FILE *fopen(const char *" pathname );
.fi
.SH DESCRIPTION
The
.BR fopen ()
function opens the file named by
.I pathname
and associates a \fBstream\fP with it\(emas described
.BR below .
.PP
.EX
fp = fopen("x", "r");
.EE
.TP
.B r
Open text file for reading.
.SH "SEE ALSO"
.BR open (2)
"""


def test_manpage_name_line_and_description_without_code():
    doc = manpage(MANPAGE, "fopen.3")
    assert doc == CorpusDoc("man:fopen.3", "fopen, fdopen - stream open functions",
                            "The fopen() function opens the file named by pathname and associates a stream with "
                            "it—as described below. r Open text file for reading.")
    assert manpage_licence(MANPAGE) == "BSD-4-Clause-UC"
    assert manpage(".so man3/fopen.3\n", "fdopen.3") is None
    assert roff_inline(r"\fIa\fR\-b\(aq\[em]\&c\e") == "a-b'—c\\"


def test_manpages_reader_skips_symlinked_names_and_counts_licences(tmp_path):
    man3 = tmp_path / "usr/share/man/man3"
    man3.mkdir(parents=True)
    (man3 / "fopen.3.gz").write_bytes(gzip.compress(MANPAGE.encode()))
    os.symlink("fopen.3.gz", man3 / "fdopen.3.gz")
    docs, licences = SOURCES["manpages"].read(tmp_path)
    assert [d.id for d in docs] == ["man:fopen.3"]
    assert licences == {"man:fopen.3": "BSD-4-Clause-UC"}


SPHINX = """<html><body>
<div class="sphinxsidebar"><p>Navigation text</p></div>
<div class="document"><div class="body" role="main">
<section id="module-heapq">
<h1><code>heapq</code> — Heap queue algorithm<a class="headerlink" href="#module-heapq">¶</a></h1>
<p>This module provides the <em>heap</em> queue algorithm, also known as
the ‘<code class="xref"><span class="pre">priority</span></code>’ queue.</p>
<div class="highlight-python3"><div class="highlight"><pre>heappush(h, 1)</pre></div></div>
<dl class="py function">
<dt class="sig sig-object py" id="heapq.heappush"><span class="pre">heapq.</span><span class="pre">heappush</span>(<em>heap</em>, <em>item</em>)<a class="headerlink" href="#heapq.heappush">¶</a></dt>
<dd><p>Push the value <em>item</em> onto the heap.</p></dd>
</dl>
<dl class="py class">
<dt class="sig sig-object py" id="heapq.Heap"><em class="property">class </em><span class="pre">heapq.</span><span class="pre">Heap</span></dt>
<dd><p>A heap object.</p>
<dl class="py method">
<dt class="sig sig-object py" id="heapq.Heap.push"><span class="pre">push</span>(<em>item</em>)</dt>
<dd><p>Push <em>item</em>.</p></dd>
</dl></dd>
</dl>
<p>More text after the entry.</p>
<section id="theory">
<h2>Theory<a class="headerlink" href="#theory">¶</a></h2>
<table><tr><td>cell text</td></tr></table>
<ul><li><p>Heaps are arrays.</p></li><li><p>They are trees.</p></li></ul>
</section></section>
</div></div>
<div class="footer">Footer text</div>
</body></html>"""


def test_sphinx_page_sections_and_api_entries_without_code_tables_or_chrome():
    got = sphinx_page(SPHINX, "library/heapq.html")
    assert got == [
        CorpusDoc("pydoc:library/heapq.html#heapq.heappush", "heapq.heappush(heap, item)", "Push the value item onto the heap."),
        CorpusDoc("pydoc:library/heapq.html#heapq.Heap.push", "heapq.Heap.push(item)", "Push item."),
        CorpusDoc("pydoc:library/heapq.html#heapq.Heap", "class heapq.Heap", "A heap object."),
        CorpusDoc("pydoc:library/heapq.html#module-heapq", "heapq — Heap queue algorithm",
                  "This module provides the heap queue algorithm, also known as the ‘priority’ queue. "
                  "More text after the entry."),
        CorpusDoc("pydoc:library/heapq.html#theory", "heapq — Heap queue algorithm: Theory",
                  "Heaps are arrays. They are trees."),
    ]


def _dictd(entries: list[tuple[list[str], str]]) -> tuple[str, bytes]:
    """A dictd index + data: each entry under several headwords (offsets in dictd's base-64)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(n: int) -> str:
        out = ""
        while True:
            out = alphabet[n % 64] + out
            n //= 64
            if not n:
                return out
    data, index = b"", []
    index.append(f"00-database-info\t{b64(0)}\t{b64(10)}")
    data += b"database\n\n"
    for heads, text in entries:
        raw = text.encode()
        index += [f"{h}\t{b64(len(data))}\t{b64(len(raw))}" for h in heads]
        data += raw
    return "\n".join(index) + "\n", data


def test_foldoc_entries_cleaned_once_per_entry():
    index, data = _dictd([
        (["ctss", "compatible timesharing system"],
         "Compatible Timesharing System\nCTSS\n\n   <operating system> (CTSS) One of the earliest (1963)\n"
         "   {time-sharing} {operating systems (http://x.org/os)}.\n\n   [\"A paper\", J. Doe, 1963].\n\n"
         "   E-mail: <a@b.edu>.\n\n   (1994-11-08)\n\n"),
        (["actor"], "actor\n\n   1. <programming> In {object-oriented} programming, an {object}.\n\n   (1994-11-08)\n\n"),
    ])
    got = [foldoc_entry(h, e) for h, e in dictd_entries(index, data)]
    assert got == [
        CorpusDoc("foldoc:Compatible Timesharing System", "Compatible Timesharing System",
                  "(CTSS) One of the earliest (1963) time-sharing operating systems."),
        CorpusDoc("foldoc:actor", "actor", "1. In object-oriented programming, an object."),
    ]


def test_freeciv_nation_plural_name_and_legend():
    text = ('[nation_aztec]\n\nname=_("Aztec")\nplural=_("?plural:Aztecs")\n'
            'legend=_("The Azteca seized control of Central\\\n Mexico. They were \\"conquered\\" in 1521.")\n\n'
            'leaders = {\n "name", "sex"\n}\n')
    assert freeciv_nation(text) == CorpusDoc("freeciv:aztec", "Aztecs",
                                             'The Azteca seized control of Central Mexico. They were "conquered" in 1521.')
    assert freeciv_nation('[nation_animals]\nname=_("Animal Kingdom")\n') is None


def test_ontology_terms_label_and_definition_without_attributions():
    from alignir.encoders.train.corpus_sources import ontology_terms

    data = {
        "MONDO:0000001": {"label": "disease", "description": "A disorder of  structure or function. [WP,unvetted]",
                          "deprecated": False},
        "MONDO:0000002": {"label": "old term", "description": "Replaced by another.", "deprecated": True},
        "MONDO:0000003": {"label": "no definition", "description": None, "deprecated": False},
        "UBERON:0000955": {"label": "brain", "description": "An imported organ.", "deprecated": False},
        "MONDO:0000004": {"label": "renal cell carcinoma [t(6;11) t-RCC]",
                          "description": "A carcinoma [t(6;11) t-RCC] of the kidney[ZFA]. [PMID]. See [1] and "
                                         "[url:http://en.wikipedia.org/wiki/Kidney ].", "deprecated": False},
    }
    assert list(ontology_terms(data, "MONDO")) == [
        CorpusDoc("MONDO:0000001", "disease", "A disorder of structure or function."),
        CorpusDoc("MONDO:0000004", "renal cell carcinoma [t(6;11) t-RCC]",
                  "A carcinoma [t(6;11) t-RCC] of the kidney. See and."),
    ]
    assert [d.id for d in ontology_terms(data, "UBERON")] == ["UBERON:0000955"]


def test_the_ontologies_reader_takes_the_newest_release_of_each_and_names_its_licence(tmp_path):
    import json
    import subprocess

    import pytest

    from alignir.encoders.train.corpus_sources import ONTOLOGY_LICENCES

    if subprocess.run(["which", "zstd"], capture_output=True).returncode:
        pytest.skip("the zstd tool is not installed")
    folder = tmp_path / "cellxgene_ontology_guide" / "data"
    folder.mkdir(parents=True)
    for prefix in ONTOLOGY_LICENCES:
        for version in ("v2024-01-01", "v2025-06-30"):
            term = {f"{prefix}:1": {"label": f"{prefix} {version}", "description": "A defined term of it.",
                                    "deprecated": False}}
            raw = folder / f"{prefix}-ontology-{version}.json"
            raw.write_text(json.dumps(term))
            subprocess.run(["zstd", "-q", "--rm", str(raw)], check=True)
    records, licences = SOURCES["biomedical-ontologies"].read(tmp_path)
    docs = list(records)
    assert [d.title for d in docs] == [f"{p} v2025-06-30" for p in ONTOLOGY_LICENCES]
    assert licences == {f"{p}:1": ONTOLOGY_LICENCES[p] for p in ONTOLOGY_LICENCES}
    assert SOURCES["biomedical-ontologies"].pypi == ("cellxgene-ontology-guide==1.11.1",)
