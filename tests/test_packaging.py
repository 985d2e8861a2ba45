"""One namespace: the folders encoders/, index/ and retrieval/ install as
alignir.encoders, alignir.index and alignir.retrieval, in a wheel and in the editable install;
`import alignir` exposes the public surface; no import cycles; `alignir.index` needs no model code."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import alignir

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"alignir.encoders": ROOT / "encoders", "alignir.index": ROOT / "index",
           "alignir.retrieval": ROOT / "retrieval", "alignir": ROOT / "src" / "alignir"}


def _source_modules() -> dict[str, Path]:
    """Every module of the package in this checkout: dotted name -> file."""
    out = {}
    for pkg, folder in FOLDERS.items():
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def test_wheel_holds_one_alignir_namespace(tmp_path):
    # build from a clean copy of the sources (an in-tree build/ could hold stale modules)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                            "tests", "benchmarks", "docs"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("alignir-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"alignir"}, f"only the alignir package goes into site-packages, got {tops}"
    wanted = {m.replace(".", "/") for m in _source_modules()}
    got = {n.removesuffix(".py").removesuffix("/__init__") for n in names if n.endswith(".py")}
    assert got == wanted, f"missing {sorted(wanted - got)}, unexpected {sorted(got - wanted)}"
    from alignir.encoders.shipped import SHIPPED

    for shipped in SHIPPED:
        assert f"alignir/encoders/adapters/{shipped}/adapter_model.safetensors" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "alignir = alignir.retrieval.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_installed_package_maps_the_repository_folders():
    """The editable install serves the checkout's folders (a normal install: site-packages)."""
    import alignir.encoders
    import alignir.index
    import alignir.retrieval

    editable = Path(alignir.index.__file__).resolve().is_relative_to(ROOT)
    if not editable:
        pytest.skip("alignir is installed from a wheel, not in editable mode")
    for pkg in ("alignir.encoders", "alignir.index", "alignir.retrieval", "alignir"):
        mod = sys.modules[pkg]
        assert Path(mod.__file__).resolve() == (FOLDERS[pkg] / "__init__.py").resolve()


def test_public_surface():
    for name in ("build_index", "Searcher", "resparsify", "IndexConfig", "SparseConfig", "DenseConfig",
                 "LexicalConfig", "FusionConfig", "UNSET",
                 "NotAnIndexError", "CorruptIndexError", "FingerprintMismatch", "IndexWriteError"):
        assert getattr(alignir, name) is not None, name
    assert alignir.__version__ and alignir.__version__ != "0+unknown"
    with pytest.raises(AttributeError):
        alignir.no_such_name  # noqa: B018


def _imports(module: str, path: Path) -> set[str]:
    """alignir modules imported by ``module`` (at any depth of its code, relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("alignir")}


def test_no_import_cycles():
    mods = _source_modules()
    graph = {m: {i for i in _imports(m, f) if i in mods and i != m} for m, f in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle through the importer
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".") or mods[i].name != "__init__.py"}
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n] if n in stack else [m, n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_index_package_loads_no_model_code():
    """Every module of alignir.index, and opening an index with all its parts (loaded through
    the part registry), import neither torch nor alignir.encoders."""
    index = ROOT / "tests" / "data" / "index_format1" / "index"
    code = ("import sys, pkgutil, importlib, alignir.index\n"
            "for m in pkgutil.iter_modules(alignir.index.__path__): importlib.import_module('alignir.index.' + m.name)\n"
            "from alignir.index.store import open_index\n"
            f"st = open_index({str(index)!r})\n"
            "assert st.sparse is not None and st.dense is not None and st.lexical is not None\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('alignir.encoders'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd="/")
    assert out.stdout.strip() == "", f"importing alignir.index loaded {out.stdout.strip()}"


def test_no_sys_path_hacks():
    offenders = [str(p.relative_to(ROOT)) for d in ("benchmarks", "tests", "encoders", "index", "retrieval", "src")
                 for p in (ROOT / d).rglob("*.py") if "sys.path.insert" in p.read_text(encoding="utf-8")
                 and p.name != Path(__file__).name]
    assert offenders == []
