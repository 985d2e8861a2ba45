"""docs/interfaces.md cannot drift: every call written there as
``module.name(params)`` must name a real object of the alignir package, and its parameters must
be real parameters of that object, in the same order."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "interfaces.md"
CALL = re.compile(r"`((?:encoders|index|retrieval|errors|checks|io|qrels)\.[A-Za-z_.]+)\(([^`]*?)\)(?: -> [^`]*)?`")


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("alignir." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{dotted} is not an alignir module")


def _split_top(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in out + [cur] if p.strip()]


def _doc_names(params: str) -> list[str]:
    names = []
    for p in _split_top(params):
        m = re.match(r"\*{0,2}([A-Za-z_][A-Za-z_0-9]*)", p)
        if m and p not in ("...", "*"):
            names.append(m.group(1))
    return names


def _calls() -> list[tuple[str, str]]:
    return CALL.findall(DOC.read_text(encoding="utf-8"))


def test_the_doc_lists_calls():
    assert len(_calls()) >= 30


def test_every_documented_call_matches_the_code():
    problems = []
    for dotted, params in _calls():
        try:
            obj = _resolve(dotted)
        except (AssertionError, AttributeError) as e:
            problems.append(f"{dotted}: {e}")
            continue
        target = obj.__init__ if inspect.isclass(obj) else obj
        real = [n for n in inspect.signature(target).parameters if n not in ("self", "cls")]
        doc = [n for n in _doc_names(params) if n not in ("kw", "kwargs", "options")]
        missing = [n for n in doc if n not in real]
        if missing:
            problems.append(f"{dotted}: the doc names {missing}, the code has {real}")
        elif doc != sorted(doc, key=real.index):
            problems.append(f"{dotted}: the doc's order {doc} differs from the code's {real}")
    assert not problems, "\n".join(problems)


@pytest.mark.e2e  # scripts/gen_interfaces.py in a child process
def test_the_generated_signatures_are_up_to_date():
    """The signature section of the doc is what scripts/gen_interfaces.py renders from the code."""
    import subprocess
    import sys

    script = DOC.parents[1] / "scripts" / "gen_interfaces.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
