"""Render docs/results.md (the headline tables of scripts/doc_tables.py and a link per result
file), benchmarks/reports/results/NAME.md (every benchmarks/results/NAME.json in full, each table
under the command that wrote its rows) and benchmarks/README.md (every benchmark script: what it
does, the result files it writes, the commands that wrote them) from the committed files.

    .venv/bin/python scripts/gen_results.py          # rewrite every page
    .venv/bin/python scripts/gen_results.py --check  # exit 1 if a committed page differs

tests/test_results_page.py runs the check, so no page can drift from the results.
"""
from __future__ import annotations

import argparse
import importlib.util
import ast
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RESULTS_PAGE = ROOT / "docs" / "results.md"
BENCH_README = ROOT / "benchmarks" / "README.md"
#: every result file in full, one page each (docs/results.md keeps the headline tables)
FULL = ROOT / "benchmarks" / "reports" / "results"
NO_COMMAND = "(no command recorded)"
#: the benchmark script a command runs: ``python -m benchmarks.FOLDER.NAME``, or the forms recorded
#: before the scripts had folders (``python benchmarks/NAME.py``, ``python -m benchmarks.NAME``)
SCRIPT = re.compile(r"python3?\s+(?:-m\s+benchmarks\.(?:\w+\.)?|benchmarks/(?:\w+/)?)(\w+)")
#: the purpose folders of benchmarks/, in the order the README lists them
FOLDERS = {
    "quality": "Retrieval quality of the product and of the anchors (BM25, MiniLM, SPLADE, EmbeddingGemma).",
    "defaults": "How the product's defaults were chosen (fusion rules and weights, sparse settings, model).",
    "speed": "Speed and cost: encoding, the sparse kernels, latency end to end.",
    "milvus": "The same index served from Milvus (Lite).",
    "training": "Training runs: the recipes, the long run, recording a run's scores.",
    "faults": "The fault campaign: damaged, killed and raced indexes and inputs.",
    "gpu": "The encoder and training on a lent GPU machine.",
    "decisions": "Decisions read off the recorded rows: the ship rule, the goals, paired tests, README tables.",
    "archive": "Scripts whose finding is on file and which are not re-run; kept so the finding can be reproduced.",
}

Scalar = (str, int, float, bool, type(None))


def fmt(v) -> str:
    """A table cell: floats to 4 significant digits, text with pipes and newlines escaped."""
    if isinstance(v, bool) or v is None:
        s = "" if v is None else str(v).lower()
    elif isinstance(v, float):
        s = f"{v:.4g}"
    elif isinstance(v, list):
        s = ", ".join(fmt(x) for x in v) if all(isinstance(x, Scalar) for x in v) else f"[{len(v)} items]"
    elif isinstance(v, dict):
        s = f"{{{len(v)} fields}}"
    else:
        s = str(v)
    return s.replace("|", "\\|").replace("\n", " ")


def flatten(row: dict) -> dict:
    """One level of nesting spelled ``a.b``; deeper values are summarised by :func:`fmt`."""
    out: dict = {}
    for k, v in row.items():
        if isinstance(v, dict) and v and all(isinstance(x, Scalar) or isinstance(x, list) for x in v.values()):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def table(rows: list[dict]) -> list[str]:
    """A markdown table of ``rows``; columns in order of first appearance."""
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    lines = ["| " + " | ".join(fmt(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return lines


def _is_rows(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _row_like(d: dict) -> bool:
    """Mostly scalar fields: a row, not a container of rows."""
    return sum(isinstance(x, Scalar) for x in d.values()) * 2 >= len(d)


def _is_keyed_rows(v) -> bool:
    return isinstance(v, dict) and len(v) > 1 and all(isinstance(x, dict) and _row_like(x) for x in v.values())


def _command_line(cmd: str) -> list[str]:
    return ["", f"`{cmd}`" if cmd != NO_COMMAND else cmd]


def by_command(rows: list[dict], default: str, shown: str | None) -> list[str]:
    """Tables of ``rows`` grouped by their ``command`` (``default`` for rows without one), in
    order of first appearance; the command line is left out when it is ``shown`` already."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        cmd = r.get("command") or default
        groups[cmd].append(flatten({k: v for k, v in r.items() if k != "command"}))
    out: list[str] = []
    for cmd, group in groups.items():
        out += ([] if cmd == shown and len(groups) == 1 else _command_line(cmd)) + [""] + table(group)
    return out


def section(obj, default: str, shown: str | None = None, heading: str = "###") -> list[str]:
    """The tables of one JSON value: a list of rows, a dict of rows (keyed), or a dict whose scalar
    fields form a two-column table and whose other fields get their own sub-section. Each table
    follows the command that wrote it (``default`` where the value records none), unless that
    command is ``shown`` right above already."""
    if _is_rows(obj):
        return by_command(obj, default, shown)
    if _is_keyed_rows(obj):
        return by_command([{"key": k, **v} for k, v in obj.items()], default, shown)
    if not isinstance(obj, dict):
        return ["", fmt(obj)]
    default = obj.get("command") or default
    out: list[str] = []
    scalars = {k: v for k, v in obj.items()
               if k != "command" and (isinstance(v, Scalar) or (isinstance(v, list) and not _is_rows(v)))}
    if scalars:
        out += ([] if default == shown else _command_line(default)) + ["", "| field | value |", "|---|---|"]
        out += [f"| {fmt(k)} | {fmt(v)} |" for k, v in scalars.items()]
        shown = default
    for k, v in obj.items():
        if k == "command" or k in scalars:
            continue
        out += ["", f"{heading} {k}"] + section(v, default, shown, heading + "#")
    return out


def result_files() -> list[Path]:
    return sorted(RESULTS.glob("*.json"))


def _commands(obj) -> list[str]:
    if isinstance(obj, dict):
        found = [obj["command"]] if isinstance(obj.get("command"), str) else []
        return found + [c for k, v in obj.items() if k != "command" for c in _commands(v)]
    if isinstance(obj, list):
        return [c for v in obj for c in _commands(v)]
    return []


def writers() -> dict[str, dict[str, list[str]]]:
    """script stem -> result file (relative to benchmarks/results) -> distinct commands naming it."""
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for path in sorted(RESULTS.rglob("*.json")):
        rel = str(path.relative_to(RESULTS))
        if rel.startswith("adapters/"):  # the kept adapters' own records (scripts/kept_adapters.py)
            continue
        for cmd in _commands(json.loads(path.read_text())):
            m = SCRIPT.search(cmd)
            if m:
                cmds = out[m.group(1)].setdefault(rel, [])
                if cmd not in cmds:
                    cmds.append(cmd)
    return out


def scripts() -> dict[str, Path]:
    """script stem -> its file, for every benchmark script in a purpose folder (stems are unique)."""
    found = [p for p in sorted(ROOT.glob("benchmarks/*/*.py")) if p.name != "__init__.py"]
    return {p.stem: p for p in found}


def module(path: Path) -> str:
    """``benchmarks.FOLDER.NAME``: what ``python -m`` runs."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def render_results() -> str:
    who = writers()
    where = scripts()
    lines = ["# Benchmark results", "",
             "Generated by `scripts/gen_results.py` from `benchmarks/results/*.json`; do not edit by hand.",
             "Each table sits under the command that wrote its rows; `benchmarks/README.md` says what each",
             "script measures. Floats are shown to 4 significant digits (the JSON files hold them in full)."]
    for path in result_files():
        names = sorted(s for s, files in who.items() if path.name in files)
        lines += ["", f"## {path.name}", ""]
        lines.append("Written by " + ", ".join(f"`{where[s].relative_to(ROOT)}`" if s in where else f"`{s}`"
                                               for s in names) + "." if names
                     else "No recorded command names the script that wrote it.")
        lines += section(json.loads(path.read_text()), NO_COMMAND)
    return "\n".join(lines) + "\n"


def _doc_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    para = doc.split("\n\n")[0]
    return " ".join(para.split())


def render_bench_readme() -> str:
    who = writers()
    by_folder: dict[str, list[Path]] = defaultdict(list)
    for path in scripts().values():
        by_folder[path.parent.name].append(path)
    unknown = sorted(set(by_folder) - set(FOLDERS))
    if unknown:
        raise SystemExit(f"benchmarks/{unknown[0]}/ is not a known purpose folder (add it to FOLDERS)")
    lines = ["# Benchmarks", "",
             "Generated by `scripts/gen_results.py` from the scripts' docstrings and the commands recorded in",
             "`benchmarks/results/`; do not edit by hand. The numbers themselves: `docs/results.md`.",
             "Run a script from the repository root as `.venv/bin/python -m benchmarks.FOLDER.NAME`; its",
             "docstring says what it measures, which result file it writes and lists its options. Commands",
             "recorded before the scripts had folders name them `benchmarks/NAME.py`.",
             "`benchmarks/common.py` holds the helpers the scripts share; results stay in `benchmarks/results/`.",
             "The weights of experiment adapters no test reads left git: `results/adapters/adapter_hashes.json`",
             "records each run's commit and sha256, and `python scripts/kept_adapters.py restore NAME` brings",
             "them back (a recorded command that names such an adapter needs that first). The mined pairs",
             "and larger corpora of `cache/` likewise: `cache/cache_hashes.json` records them with the",
             "command that rebuilds them, `python scripts/kept_adapters.py restore-cache PATH` brings them back.",
             "", "| folder | purpose | scripts |", "|---|---|---|"]
    lines += [f"| [{f}/](#{f}) | {purpose} | {len(by_folder.get(f, []))} |" for f, purpose in FOLDERS.items()]
    for folder, purpose in FOLDERS.items():
        paths = sorted(by_folder.get(folder, []))
        if not paths:
            continue
        lines += ["", f"## {folder}", "", purpose, ""]
        helpers = []
        for path in paths:
            files = who.get(path.stem)
            if not files:
                helpers.append(path)
                continue
            lines += [f"### {path.name}", "", f"`python -m {module(path)}`: {_doc_line(path)}", ""]
            for rel, cmds in files.items():
                lines.append(f"- `results/{rel}`:")
                lines += [f"  - `{c}`" for c in cmds]
            lines.append("")
        if helpers:
            lines += ["No recorded result of their own:", ""]
            lines += [f"- `{p.name}` (`{module(p)}`): {_doc_line(p)}" for p in helpers]
    return "\n".join(lines) + "\n"


def _doc_tables():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def full_pages() -> dict[Path, str]:
    """benchmarks/reports/results/NAME.md: the section of each result file in ``render_results``
    as a page of its own, and README.md listing them."""
    intro = ["Generated by `scripts/gen_results.py` from `benchmarks/results/{}`; do not edit by hand.",
             "Each table sits under the command that wrote its rows. Floats are shown to 4 significant digits.",
             "The headline tables: [docs/results.md](../../../docs/results.md)."]
    pages = {}
    index = ["# Every result file in full", "", intro[0].format("*.json"), "", "| result file | page |", "|---|---|"]
    for part in render_results().split("\n## ")[1:]:
        name, _, body = part.partition("\n")
        page = FULL / f"{Path(name).stem}.md"
        pages[page] = "\n".join([f"# {name}", "", intro[0].format(name), *intro[1:], body.rstrip("\n"), ""])
        index.append(f"| `{name}` | [{page.name}]({page.name}) |")
    pages[FULL / "README.md"] = "\n".join(index) + "\n"
    return pages


def render_summary() -> str:
    """docs/results.md: the headline tables (scripts/doc_tables.py) and a link to every result file's page."""
    tables = _doc_tables()
    who, where = writers(), scripts()
    lines = ["# Benchmark results: the headline tables", "",
             "Generated by `scripts/gen_results.py` from `benchmarks/results/*.json`; do not edit by hand.",
             "Every result file is rendered in full, each table under the command that wrote its rows, in",
             "[benchmarks/reports/results/](../benchmarks/reports/results/README.md); what each benchmark",
             "showed is in [benchmarks/reports/](../benchmarks/reports/benchmarks-findings.md).", "",
             "## The shipped models against what a user would build instead", "",
             "nDCG@10 on the judged test queries, three legs / dense ([models.md](models.md) says how to choose):",
             "", tables.standing(), "",
             "## Goals", "",
             "Each model against the goals of `benchmarks/decisions/goals.py` (`goals.json`):", "",
             tables.goals(), "",
             "## Cost", "",
             "The default model against all-MiniLM-L6-v2 + bm25s, 300 documents per collection (`end_to_end.json`):",
             "", tables.cost(), "",
             "## Every result file", "", "| result file | written by | full tables |", "|---|---|---|"]
    for path in result_files():
        names = sorted(s for s, files in who.items() if path.name in files)
        by = ", ".join(f"`{module(where[n])}`" if n in where else f"`{n}`" for n in names) or "–"
        lines.append(f"| `{path.name}` | {by} | "
                     f"[{path.stem}.md](../benchmarks/reports/results/{path.stem}.md) |")
    return "\n".join(lines) + "\n"


def all_pages() -> dict[Path, str]:
    """Every generated page and its text."""
    out = {page: render() for page, render in PAGES.items()}
    out.update(full_pages())
    return out


PAGES = {RESULTS_PAGE: render_summary, BENCH_README: render_bench_readme}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed page differs")
    args = ap.parse_args(argv)
    stale = []
    pages = all_pages()
    for page, text in pages.items():
        if args.check:
            if not page.is_file() or page.read_text() != text:
                stale.append(str(page.relative_to(ROOT)))
        else:
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(text)
    for orphan in sorted(set(FULL.glob("*.md")) - set(pages)):  # a result file that is gone
        if args.check:
            stale.append(str(orphan.relative_to(ROOT)))
        else:
            orphan.unlink()
    if stale:
        print(f"out of date: {', '.join(stale)} (run: python scripts/gen_results.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
