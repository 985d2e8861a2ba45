"""Title + body records from marked-up documentation: manual pages (roff: the NAME line and the
DESCRIPTION section) and Sphinx HTML pages (the Python documentation: each section under its
heading, and each API entry's signature with its description). Code blocks, tables and
examples are left out: the records are prose."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from alignir.encoders.train.corpus_text import clean_space
from alignir.encoders.train.unsupervised import CorpusDoc

__all__ = ["roff_inline", "manpage", "manpage_licence", "sphinx_page"]

# ---------------------------------------------------------------- manual pages (roff)

_GLYPHS = {"em": "—", "en": "–", "aq": "'", "dq": '"', "lq": "“", "rq": "”", "oq": "‘", "cq": "’",
           "bu": "•", "co": "©", "rg": "®", "mu": "×", "di": "÷", "<=": "≤", ">=": "≥", "!=": "≠",
           "ti": "~", "ha": "^", "rs": "\\", "pl": "+", "mi": "-", "hy": "-", "ga": "`", "aa": "´",
           "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›", "sq": "□", "de": "°", "+-": "±", "->": "→"}
_ESCAPE = re.compile(r"\\(?:\((..)|\[([^\]]*)\]|[fFn*](?:\(..|\[[^\]]*\]|.)|s[-+]?\d+|(.))")
_SIMPLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": " ", "'": "´", "`": "`", ".": "."}
#: macros whose arguments are text in one font (joined with spaces) or alternating fonts (joined tight)
_FONT = {"B", "I", "SM", "SB"}
_ALTERNATING = {"BR", "RB", "IR", "RI", "BI", "IB"}
#: no-fill blocks (code, tables, examples): their lines are not prose
_BLOCKS = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN", "PS": "PE"}


def _escape(m: re.Match) -> str:
    glyph = m.group(1) or m.group(2)
    if glyph is not None:
        return _GLYPHS.get(glyph, "")
    return _SIMPLE.get(m.group(3) or "", "")


def roff_inline(text: str) -> str:
    """``text`` with roff's escapes resolved: fonts and sizes dropped, named glyphs (``\\(em``,
    ``\\[aq]``) as characters, ``\\-`` a hyphen, ``\\&`` and other zero-width escapes removed."""
    return _ESCAPE.sub(_escape, text)


def _args(line: str) -> list[str]:
    """A macro line's arguments: space separated, double quotes group (``""`` inside is a quote)."""
    out, cur, quoted, i = [], "", False, 0
    while i < len(line):
        ch = line[i]
        if ch == '"':
            if quoted and line[i + 1:i + 2] == '"':
                cur += '"'
                i += 1
            else:
                quoted = not quoted
        elif ch in " \t" and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        out.append(cur)
    return out


def _sections(text: str) -> dict[str, list[str]]:
    """Text lines of each ``.SH`` section (upper-cased name), macros turned into text or dropped."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    block_end: str | None = None
    for raw in text.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"', ".\\#")):
            continue
        if raw.startswith((".", "'")) and len(raw) > 1:
            parts = raw[1:].strip().split(None, 1)
            macro = parts[0] if parts else ""
            rest = parts[1] if len(parts) > 1 else ""
            if block_end is not None:
                if macro == block_end:
                    block_end = None
                continue
            if macro in _BLOCKS:
                block_end = _BLOCKS[macro]
            elif macro == "SH":
                current = out.setdefault(roff_inline(" ".join(_args(rest))).strip().upper(), [])
            elif current is None:
                continue
            elif macro in _FONT:
                current.append(roff_inline(" ".join(_args(rest))))
            elif macro in _ALTERNATING:
                current.append(roff_inline("".join(_args(rest))))
            elif macro == "IP" and rest:
                tag = roff_inline(_args(rest)[0]).strip()
                if tag and tag not in "•-*":
                    current.append(tag)
            continue  # paragraph macros and requests carry no text
        if block_end is None and current is not None:
            current.append(roff_inline(raw))
    return out


def manpage(text: str, page: str) -> CorpusDoc | None:
    """The record of one manual page (roff source): title = its NAME line (``fopen, fdopen -
    stream open functions``), text = its DESCRIPTION section without code, tables and examples.
    None for a page that only includes another (``.so``) or lacks either section."""
    if re.search(r"^\.so\s", text, re.M) and not re.search(r"^\.SH", text, re.M):
        return None
    sections = _sections(text)
    name = clean_space(" ".join(sections.get("NAME", [])))
    body = clean_space(" ".join(sections.get("DESCRIPTION", [])))
    if not name or not body:
        return None
    return CorpusDoc(f"man:{page}", name, body)


def manpage_licence(text: str) -> str | None:
    """The page's ``SPDX-License-Identifier`` comment, if it has one."""
    m = re.search(r"SPDX-License-Identifier:\s*(.+?)\s*$", text, re.M)
    return m.group(1) if m else None


# ---------------------------------------------------------------- Sphinx HTML (Python docs)

_SKIP_TAGS = {"pre", "script", "style", "table", "nav"}
_BLOCK_TAGS = {"p", "li", "dt", "dd", "div", "blockquote", "ul", "ol", "dl", "section", "br"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
#: a Sphinx API entry: <dl class="py function">, <dl class="c macro">, ...
_DOMAINS = {"py", "c", "cpp", "std"}


class _SphinxParser(HTMLParser):
    """Collects the sections and API entries of the page's ``div.body``."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.page = page
        self.records: list[CorpusDoc] = []
        self.divs: list[bool] = []          # per open <div>: is it the body
        self.div_skips: list[bool] = []     # per open <div>: is it a code block (counted in skip)
        self.anchors: list[bool] = []       # per open <a>: is it a headerlink (¶)
        self.skip = 0                       # open elements whose text is not prose
        self.page_title = ""
        self.section_id = ""
        self.section: tuple[str, str] | None = None  # (id, title) of the section being read
        self.section_text: list[str] = []
        self.heading: list[str] | None = None
        self.entries: list[dict] = []       # open API entries (nested <dl>)
        self.dls: list[bool] = []           # per open <dl>: is it an API entry

    # where the text goes now
    def _target(self) -> list[str] | None:
        if not any(self.divs) or self.skip:
            return None
        if self.heading is not None:
            return self.heading
        if self.entries:
            e = self.entries[-1]
            return e["dt"] if e["in"] == "dt" else e["dd"] if e["in"] == "dd" else None
        return self.section_text

    def _flush_section(self) -> None:
        if self.section is not None:
            self.records.append(CorpusDoc(self.section[0], self.section[1], clean_space("".join(self.section_text))))
        self.section, self.section_text = None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "div":
            self.divs.append("body" in classes and a.get("role") == "main")
            self.div_skips.append(any(c.startswith("highlight") for c in classes))
            self.skip += self.div_skips[-1]
        if tag == "a":
            self.anchors.append("headerlink" in classes)
            if self.anchors[-1]:
                self.skip += 1
        if tag in _SKIP_TAGS:
            self.skip += 1
        if tag == "section" and a.get("id"):
            self.section_id = a["id"]
        if not any(self.divs):
            return
        if tag in _HEADINGS and not self.entries:
            self.heading = []
        elif tag == "dl":
            entry = bool(classes) and classes[0] in _DOMAINS and len(classes) > 1
            self.dls.append(entry)
            if entry:
                self.entries.append({"id": "", "dt": [], "dd": [], "in": None})
        elif tag == "dt" and self.entries and self.entries[-1]["in"] is None:
            self.entries[-1]["in"] = "dt"
            self.entries[-1]["id"] = a.get("id") or ""
        elif tag == "dd" and self.entries and self.entries[-1]["in"] in ("dt", "dt-done"):
            self.entries[-1]["in"] = "dd"
        if tag in _BLOCK_TAGS and (t := self._target()) is not None:
            t.append(" ")

    def handle_endtag(self, tag):
        if tag in _BLOCK_TAGS and (t := self._target()) is not None:
            t.append(" ")
        if tag == "a" and self.anchors:
            if self.anchors.pop():
                self.skip -= 1
        if tag in _SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        if tag == "div" and self.divs:
            self.divs.pop()
            self.skip -= self.div_skips.pop()
        if tag in _HEADINGS and self.heading is not None:
            text = clean_space("".join(self.heading)).rstrip("¶").strip()
            self.heading = None
            self._flush_section()
            if tag == "h1" and not self.page_title:
                self.page_title = text
            title = text if text == self.page_title or not self.page_title else f"{self.page_title}: {text}"
            self.section = (f"pydoc:{self.page}#{self.section_id}", title)
        elif tag == "dt" and self.entries and self.entries[-1]["in"] == "dt":
            self.entries[-1]["in"] = "dt-done"
        elif tag == "dd" and self.entries and self.entries[-1]["in"] == "dd":
            self.entries[-1]["in"] = "dd-done"
        elif tag == "dl" and self.dls:
            if self.dls.pop():
                e = self.entries.pop()
                title = _qualified(clean_space("".join(e["dt"])).rstrip("¶").strip(), e["id"])
                if title and e["id"]:
                    self.records.append(CorpusDoc(f"pydoc:{self.page}#{e['id']}", title,
                                                  clean_space("".join(e["dd"]))))

    def handle_data(self, data):
        if (t := self._target()) is not None:
            t.append(data)


def _qualified(signature: str, anchor: str) -> str:
    """A method's signature under its full dotted name (``bbox(item)`` with anchor
    ``tkinter.ttk.Treeview.bbox`` -> ``tkinter.ttk.Treeview.bbox(item)``); others unchanged."""
    m = re.match(r"((?:[a-z]+ )*)([\w.]+)", signature)
    if not m or anchor == m.group(2) or not anchor.endswith("." + m.group(2)):
        return signature
    return m.group(1) + anchor + signature[m.end():]


def sphinx_page(html: str, page: str) -> list[CorpusDoc]:
    """Records of one Sphinx HTML page: each section (title ``Page title: Heading``, text its
    paragraphs and lists, API entries excluded) and each API entry (title its signature, text its
    description, a method's under its full dotted name); code blocks, tables and permalink marks left out. Ids: ``pydoc:PAGE#ANCHOR``."""
    p = _SphinxParser(page)
    p.feed(html)
    p.close()
    p._flush_section()
    return p.records
