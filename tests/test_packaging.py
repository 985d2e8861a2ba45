"""One namespace: the folders encoders/, index/ and retrieval/ install as
alignir.encoders, alignir.index and alignir.retrieval, in a wheel and in the editable install;
`import alignir` exposes the public surface; imports follow the layers of docs/interfaces.md and form
no cycle; `alignir.index` needs no model code."""
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


@pytest.mark.e2e  # pip builds the wheel in a child process
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


#: the layers, bottom up: each package may import itself and what it lists, never a sibling layer.
#: "alignir" is the core (src/alignir/: errors, checks, io, qrels); its __init__ names the public
#: surface but imports it lazily (by name), with no import statement.
LAYERS: dict[str, frozenset[str]] = {
    "alignir": frozenset({"alignir"}),
    "alignir.index": frozenset({"alignir", "alignir.index"}),
    "alignir.encoders": frozenset({"alignir", "alignir.encoders"}),
    "alignir.retrieval": frozenset({"alignir", "alignir.index", "alignir.encoders", "alignir.retrieval"}),
}
#: the repository's folders outside the package: the package never imports them
OUTSIDE = ("benchmarks", "scripts", "tests", "conftest")


def _layer(module: str) -> str:
    return next((p for p in LAYERS if p != "alignir" and (module == p or module.startswith(p + "."))), "alignir")


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported name, line) of every import in ``module``, at any depth of its code (inside
    functions and ``if TYPE_CHECKING`` too), relative ones resolved; ``from a import b`` gives
    ``a`` and ``a.b``. A public name of the top package (``from alignir import Searcher``) counts
    as its defining module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            out.append((base, node.lineno))
            out += [(alignir._EXPORTS.get(a.name, f"{base}.{a.name}") if base == "alignir" else f"{base}.{a.name}",
                     node.lineno) for a in node.names]
    return out


def _layering_violations(mods: dict[str, Path]) -> list[str]:
    """One line per import that goes up or sideways between layers, or out of the package."""
    bad: dict[tuple[Path, int], str] = {}
    for m, f in sorted(mods.items()):
        allowed = LAYERS[_layer(m)]
        for name, line in _imports(m, f):
            top = name.split(".")[0]
            if top == "alignir" and _layer(name) not in allowed:
                bad.setdefault((f, line), f"{f}:{line}: {m} imports {name} ({_layer(m)} may import only "
                                          f"{', '.join(sorted(allowed))})")
            elif top in OUTSIDE:
                bad.setdefault((f, line), f"{f}:{line}: {m} imports {name} (the package never imports "
                                          f"the repository's {top}/)")
    return list(bad.values())


def _import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph = {m: {i for i, _ in _imports(m, f) if i in mods and i != m} for m, f in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle through the importer
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".") or mods[i].name != "__init__.py"}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (cycle := visit(n, stack + [n])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m, [m])):
            return cycle
    return None


def test_imports_respect_the_layers():
    """core alignir < alignir.index, alignir.encoders (never each other) < alignir.retrieval."""
    problems = _layering_violations(_source_modules())
    assert not problems, "imports against the layering (docs/interfaces.md):\n" + "\n".join(problems)


def test_the_package_imports_the_store_modules_not_their_public_front():
    """index.store only gathers the public names of index.writer / reader / manifest_io; the
    package's own code imports the module that does the work."""
    users = [f"{f}:{line}" for m, f in _source_modules().items() for name, line in _imports(m, f)
             if name == "alignir.index.store" or name.startswith("alignir.index.store.")]
    assert users == []


def test_no_import_cycles():
    cycle = _find_cycle(_import_graph(_source_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_layering_check_names_an_offending_import(tmp_path):
    """The two checks above on a made-up package: each wrong import is reported with its line."""
    files = {"alignir.encoders.bad": "import numpy\n\ndef f():\n    from alignir.index.sparse import SparseIndex\n",
             "alignir.index.ok": "from alignir.io import save_npy\nfrom alignir.index import parts\n",
             "alignir.index.up": "from alignir import Searcher\n",
             "alignir.leaky": "import benchmarks.common\n",
             "alignir.retrieval.top": "from alignir.encoders import bad\nfrom alignir.index.ok import x\n"}
    mods = {}
    for name, text in files.items():
        mods[name] = tmp_path / f"{name}.py"
        mods[name].write_text(text)
    problems = _layering_violations(mods)
    assert [p.split(": ", 1)[1].split(" (")[0] for p in problems] == [
        "alignir.encoders.bad imports alignir.index.sparse",
        "alignir.index.up imports alignir.retrieval.searcher",
        "alignir.leaky imports benchmarks.common"], problems
    assert problems[0].startswith(f"{mods['alignir.encoders.bad']}:4: ")
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.e2e  # a child Python process
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
