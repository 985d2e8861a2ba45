"""The page at ``/``: server-rendered HTML (the index, its modes, the fusion rules) and a little
vanilla JavaScript (static/page.js) that searches through the JSON API and shows each hit's leg
scores, its text with the matched aligned tokens and BM25 words highlighted (weight as
intensity), the query's expansion tokens and the fusion plan. No build step, no CDN."""
from __future__ import annotations

from html import escape
from typing import Any

from alignir.retrieval.fusion_plan import RULES

FUSIONS = ("minmax", "zscore", "rrf", "agree", "calibrated")


def _options(values: list[tuple[str, str]], selected: str) -> str:
    return "".join(f'<option value="{escape(v)}"{" selected" if v == selected else ""}>{escape(label)}</option>'
                   for v, label in values)


def render_page(info: dict[str, Any]) -> str:
    """The page for the index ``info`` describes (``Service.info``)."""
    modes = list(info.get("modes") or ["bm25"])
    default_mode = "hybrid" if "hybrid" in modes else modes[0]
    fusions = [("", "the plan's default")] + [(f, f"{f}: {RULES.get(f, f)}") for f in FUSIONS]
    note = "" if info.get("stores_text") else (
        '<p class="note">This index does not store its texts (build it with --store-text to see them here).</p>')
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>alignir · {escape(str(info.get("index", "")))}</title>
<link rel="stylesheet" href="/static/page.css">
</head>
<body>
<header>
  <h1>alignir</h1>
  <p class="meta">{escape(str(info.get("index", "")))} · {int(info.get("documents", 0))} documents ·
  legs {escape(", ".join(info.get("legs", [])))} · version <code id="version">{escape(str(info.get("index_version", "")))}</code></p>
</header>
<form id="search" autocomplete="off">
  <input id="q" name="q" type="search" placeholder="Search…" maxlength="{int(info["limits"]["max_query_chars"])}" required>
  <label>mode <select id="mode" name="mode">{_options([(m, m) for m in modes], default_mode)}</select></label>
  <label>fusion <select id="fusion" name="fusion">{_options(fusions, "")}</select></label>
  <label>k <input id="k" name="k" type="number" min="1" max="{int(info["limits"]["max_k"])}" value="10"></label>
  <button type="submit">Search</button>
</form>
{note}
<p class="legend"><span class="hl-aligned" style="--w:0.8">aligned token</span>
<span class="hl-bm25" style="--w:0.8">BM25 word</span> · the stronger the colour, the more the term adds to the score</p>
<p id="status" role="status"></p>
<section id="plan" hidden><h2>Fusion plan</h2><div id="plan-body"></div></section>
<section id="expansion" hidden><h2>Query tokens</h2><div id="expansion-body"></div></section>
<ol id="hits"></ol>
<script src="/static/page.js"></script>
</body>
</html>
"""
