"""No large files pile up in git: a tracked file over 1 MiB must be on the allow-list below, by
path: the shipped adapters and the few experiment runs a test reads. The weights of the other
runs and the recomputable caches left the tree, recorded with sha256 and commit (and, for a cache,
the command that rebuilds it) in benchmarks/results/adapters/adapter_hashes.json and
benchmarks/cache/cache_hashes.json; scripts/kept_adapters.py restores them. A new large file fails
here: record it and keep it outside git, or add it here with a reason."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1 << 20  # 1 MiB

#: the shipped adapters (alignir.encoders.shipped): they stay
SHIPPED = (
    "encoders/adapters/gemma3-270m-alignir/adapter_model.safetensors",
    "encoders/adapters/smollm2-135m-alignir-v2/adapter_model.safetensors",
    "encoders/adapters/smollm2-135m-alignir-v3/adapter_model.safetensors",
    "encoders/adapters/smollm2-135m-alignir-v4/adapter_model.safetensors",
    "encoders/adapters/smollm2-135m-alignir/adapter_model.safetensors",
)
#: experiment runs whose weights stay: each is read by a test of tests/test_kept_adapters.py (the
#: others left the tree: scripts/kept_adapters.py restore NAME)
KEPT = (
    # re-scores its ADI row (test_a_kept_adapter_re_scores_its_recorded_adi_row)
    "benchmarks/results/adapters/gpu-distill-85/adapter_model.safetensors",
    # aligned-token maps on a shipped adapter: re-score their ADI rows
    "benchmarks/results/adapters/v3-map-scifact/adapter_model.safetensors",
    "benchmarks/results/adapters/v3-map-scifact/alignir_sparse_map.safetensors",
    "benchmarks/results/adapters/v3-map-scifact-fw/adapter_model.safetensors",
    "benchmarks/results/adapters/v3-map-scifact-fw/alignir_sparse_map.safetensors",
    "benchmarks/results/adapters/v4-map-scifact-fw/adapter_model.safetensors",
    "benchmarks/results/adapters/v4-map-scifact-fw/alignir_sparse_map.safetensors",
    "benchmarks/results/adapters/v4-map-scifact-fw3e-5/adapter_model.safetensors",
    "benchmarks/results/adapters/v4-map-scifact-fw3e-5/alignir_sparse_map.safetensors",
    "benchmarks/results/adapters/gemma3-map-scifact-fw/adapter_model.safetensors",
    "benchmarks/results/adapters/gemma3-map-scifact-fw/alignir_sparse_map.safetensors",
    # re-scores its ADI row, and is the source adapter of gemma3-bio-map-scifact-fw3e-5
    "benchmarks/results/adapters/long-base-gemma3-270m-1500-mined-1500-bio-200/adapter_model.safetensors",
    # an aligned-token map on the run above: re-scores its ADI row
    "benchmarks/results/adapters/gemma3-bio-map-scifact-fw3e-5/adapter_model.safetensors",
    "benchmarks/results/adapters/gemma3-bio-map-scifact-fw3e-5/alignir_sparse_map.safetensors",
    # the end point of the recorded interpolation cpu-interpolated-v3-gemma-teacher-050, rebuilt from it
    "benchmarks/results/adapters/cpu-gemma-teacher-800/adapter_model.safetensors",
)
ALLOWED = frozenset(SHIPPED + KEPT)


def _tracked_sizes() -> dict[str, int]:
    """Tracked path -> its size in the work tree (what a clone gets); paths deleted here are left out."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = [p for p in out.decode().split("\0") if p]
    return {p: (ROOT / p).stat().st_size for p in paths if (ROOT / p).is_file()}


def _kept_module():
    spec = importlib.util.spec_from_file_location("kept_adapters", ROOT / "scripts" / "kept_adapters.py")
    kept = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kept)
    return kept


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True)


def test_every_tracked_file_over_1_mib_is_allowed():
    big = sorted(p for p, size in _tracked_sizes().items() if size > LIMIT)
    assert [p for p in big if p not in ALLOWED] == []


def test_the_allow_list_names_only_large_tracked_files():
    """A path that left git or shrank leaves the list too, so the list only ever shrinks."""
    sizes = _tracked_sizes()
    assert sorted(p for p in ALLOWED if sizes.get(p, 0) <= LIMIT) == []


def test_removed_weights_are_ignored_and_recorded():
    """Weights and caches that left the tree are gitignored (they do not come back by accident) and
    recorded with the sha256 and commit that restore them (a cache with the command that rebuilds it)."""
    import json

    record = json.loads((ROOT / "benchmarks/results/adapters/adapter_hashes.json").read_text())
    removed = [f"benchmarks/results/adapters/{name}/{f}" for name, run in record["runs"].items()
               for f in run["removed"]]
    assert removed, "no experiment weights have left the tree"
    for name, run in record["runs"].items():
        assert len(run["commit"]) == 40 and run["files"], name
        for f in run["removed"]:
            assert len(run["files"][f]["sha256"]) == 64, (name, f)
    caches = json.loads((ROOT / "benchmarks/cache/cache_hashes.json").read_text())["caches"]
    assert any(entry["removed"] for entry in caches.values()), "no cache has left the tree"
    for key, entry in caches.items():
        assert len(entry["commit"]) == 40 and entry["files"] and entry["command"], key
        for f in entry["removed"]:
            assert len(entry["files"][f]["sha256"]) == 64 and f.startswith(key), (key, f)
            removed.append(f)
    out = subprocess.run(["git", "check-ignore", "--no-index", *removed], cwd=ROOT, capture_output=True,
                         text=True).stdout.split()
    assert sorted(out) == sorted(removed)
    assert not set(removed) & set(_tracked_sizes())


def test_the_kept_weights_match_their_record():
    kept = _kept_module()
    assert kept.check() == 0


def _scratch_run(tmp_path, monkeypatch):
    """A scratch repository with one committed run folder (weights and training record) and the
    module pointed at it: (module, repository, weights path)."""
    kept = _kept_module()
    repo, adapters = tmp_path / "repo", tmp_path / "repo" / "benchmarks" / "results" / "adapters"
    (adapters / "run").mkdir(parents=True)
    weights = adapters / "run" / "adapter_model.safetensors"
    weights.write_bytes(bytes(range(256)) * 64)
    (adapters / "run" / "alignir_train.json").write_text('{"config": "{\'seed\': 7}"}')
    for args in (("init", "-q"), ("add", "."), ("commit", "-q", "-m", "a run")):
        _git(repo, *args)
    for name, value in (("ROOT", repo), ("ADAPTERS", adapters), ("RECORD", adapters / "adapter_hashes.json"),
                        ("TRAIN_RESULTS", repo / "none.json"), ("CACHE_RECORD", repo / "no-caches.json")):
        monkeypatch.setattr(kept, name, value)
    return kept, repo, weights


def test_removed_weights_come_back_from_their_commit_bit_for_bit(tmp_path, monkeypatch):
    """record, remove, restore in a scratch repository: the restored file is the recorded one, and a
    record whose sha256 does not match what the commit holds is refused."""
    kept, repo, weights = _scratch_run(tmp_path, monkeypatch)
    assert kept.main(["record", "run"]) == 0
    original = weights.read_bytes()
    kept.mark_removed(["run"], ["adapter_model.safetensors"])
    weights.unlink()
    assert kept.check() == 0 and kept.load()["runs"]["run"]["seed"] == 7
    assert kept.main(["restore", "run"]) == 0
    assert weights.read_bytes() == original
    weights.unlink()
    record = kept.load()
    record["runs"]["run"]["files"]["adapter_model.safetensors"]["sha256"] = "0" * 64
    kept.save(record)
    assert kept.main(["restore", "--all"]) == 1 and not weights.exists()


def test_a_run_whose_weights_left_the_tree_is_recorded_again_with_a_new_file(tmp_path, monkeypatch):
    """A file added to a run folder after its weights left git (a licence NOTICE) is recorded at its
    own commit; the weights keep the commit that holds them and still come back bit for bit."""
    kept, repo, weights = _scratch_run(tmp_path, monkeypatch)
    adapters = weights.parent.parent
    assert kept.main(["record", "run"]) == 0
    first = kept.load()["runs"]["run"]["commit"]
    original = weights.read_bytes()
    assert kept.main(["remove", "run"]) == 0 and not weights.exists()
    _git(repo, "commit", "-q", "-am", "weights leave the tree")
    (adapters / "run" / "NOTICE").write_text("terms\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "a notice")
    assert kept.main(["record", "run"]) == 0
    run = kept.load()["runs"]["run"]
    assert run["commit"] != first and run["removed"] == ["adapter_model.safetensors"]
    assert run["files"]["adapter_model.safetensors"]["commit"] == first and "NOTICE" in run["files"]
    assert kept.check() == 0
    assert kept.main(["restore", "run"]) == 0 and weights.read_bytes() == original
    with pytest.raises(SystemExit, match="recorded as removed but is in the tree"):
        kept.record(["run"])


def _scratch_cache(tmp_path, monkeypatch):
    """A scratch repository with one committed cache file and the module pointed at it."""
    kept = _kept_module()
    repo = tmp_path / "repo"
    cache = repo / "benchmarks" / "cache"
    (cache / "corpora" / "c").mkdir(parents=True)
    (repo / "benchmarks" / "results" / "adapters").mkdir(parents=True)
    data = cache / "corpora" / "c" / "corpus.jsonl.gz"
    data.write_bytes(bytes(range(256)) * 32)
    (cache / "corpora" / "c" / "SOURCE.json").write_text("{}")
    for args in (("init", "-q"), ("add", "."), ("commit", "-q", "-m", "a cache")):
        _git(repo, *args)
    for name, value in (("ROOT", repo), ("ADAPTERS", repo / "benchmarks" / "results" / "adapters"),
                        ("RECORD", repo / "benchmarks" / "results" / "adapters" / "adapter_hashes.json"),
                        ("CACHE", cache), ("CACHE_RECORD", cache / "cache_hashes.json")):
        monkeypatch.setattr(kept, name, value)
    return kept, data


def test_a_removed_cache_comes_back_from_its_commit_bit_for_bit(tmp_path, monkeypatch):
    """record-cache, remove-cache, restore-cache in a scratch repository: the file comes back from its
    commit without running the command (which would fail), and ``check`` sees it as recorded."""
    kept, data = _scratch_cache(tmp_path, monkeypatch)
    original = data.read_bytes()
    key = "benchmarks/cache/corpora/c/corpus.jsonl.gz"
    assert kept.main(["record-cache", str(data), "--command", "exit 3"]) == 0
    entry = kept.load_caches()["caches"][key]
    assert entry["files"][key]["bytes"] == len(original) and len(entry["commit"]) == 40
    assert kept.main(["remove-cache", key]) == 0
    assert not data.exists() and kept.load_caches()["caches"][key]["removed"] == [key]
    assert kept.check() == 0
    assert kept.main(["restore-cache", key]) == 0
    assert data.read_bytes() == original
    assert kept.main(["restore-cache", "benchmarks/cache/other.jsonl"]) == 2  # not recorded


def test_a_cache_without_history_is_rebuilt_and_a_rebuild_that_differs_says_so(tmp_path, monkeypatch, capsys):
    """Where the recorded commit is not in the history (a shallow clone), restore-cache runs the
    recorded command and checks what it wrote against the sha256: the same bytes pass, other bytes
    fail with the file named."""
    kept, data = _scratch_cache(tmp_path, monkeypatch)
    key = "benchmarks/cache/corpora/c/corpus.jsonl.gz"
    same = tmp_path / "same.bin"
    same.write_bytes(data.read_bytes())
    assert kept.main(["record-cache", key, "--command", f"cp {same} {key}"]) == 0
    kept.main(["remove-cache", key])
    record = kept.load_caches()
    record["caches"][key]["commit"] = "f" * 40  # a commit this clone lacks
    kept.save_caches(record)
    assert kept.main(["restore-cache", "--all"]) == 0 and data.read_bytes() == same.read_bytes()
    data.write_bytes(b"stale")  # a file that is not the recorded one is replaced too
    assert kept.main(["restore-cache", key]) == 0 and data.read_bytes() == same.read_bytes()
    record["caches"][key]["command"] = f"printf other > {key}"
    kept.save_caches(record)
    data.unlink()
    capsys.readouterr()
    assert kept.main(["restore-cache", key]) == 1
    err = capsys.readouterr().err
    assert f"{key}: rebuilt, but sha256" in err and "differs from the recorded" in err
    assert kept.check() == 1  # the rebuilt file is in the tree and is not the recorded one
    record["caches"][key]["command"] = "exit 1"
    kept.save_caches(record)
    data.unlink()
    assert kept.main(["restore-cache", key]) == 1 and "the command failed" in capsys.readouterr().err
    # --rebuild runs the command although the history holds the file
    record["caches"][key].update(commit=kept.git("rev-parse", "HEAD"), command=f"printf other > {key}")
    kept.save_caches(record)
    assert kept.main(["restore-cache", key]) == 0
    assert kept.main(["restore-cache", key, "--rebuild"]) == 1 and data.read_bytes() == b"other"
    # a step of the rebuilding command that asks for the same cache does not start it again
    data.unlink()
    monkeypatch.setenv(kept.REBUILDING, key)
    assert kept.main(["restore-cache", key]) == 0 and not data.exists()


def test_the_kept_runs_are_those_a_test_reads():
    """Each experiment run on the allow-list is one of record_gpu_fusion_rows.KEPT_RUNS, whose ADI
    rows tests/test_kept_adapters.py re-scores, or the source of a kept map or of an interpolation
    it rebuilds (INTERPOLATED_RUNS: every recorded interpolation); any other run's weights leave the tree."""
    import json

    from benchmarks.training.record_gpu_fusion_rows import INTERPOLATED_RUNS, KEPT_RUNS

    spec = importlib.util.spec_from_file_location("kept_adapter_tests", ROOT / "tests" / "test_kept_adapters.py")
    readers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readers)
    for test, names in ((readers.test_a_kept_adapter_re_scores_its_recorded_adi_row, KEPT_RUNS),
                        (readers.test_an_interpolated_run_is_rebuilt_from_its_kept_sources_and_re_scores_its_adi_row,
                         INTERPOLATED_RUNS)):
        mark, = [m for m in test.pytestmark if m.name == "parametrize"]
        assert tuple(mark.args[1]) == names, test.__name__
    adapters = "benchmarks/results/adapters/"
    runs = json.loads((ROOT / "benchmarks/results/gpu_train.json").read_text())["runs"]
    assert {name for name, run in runs.items() if run.get("interpolation")} == set(INTERPOLATED_RUNS)
    needed = set()
    for name in KEPT_RUNS:
        folder = runs[name]["kept_adapter"]
        needed.add(folder[len(adapters):])
        map_file = ROOT / folder / "alignir_sparse_map.json"
        if map_file.is_file():
            source = json.loads(map_file.read_text())["source_adapter"]
            needed |= {source[len(adapters):]} if source.startswith(adapters) else set()
    for name in INTERPOLATED_RUNS:
        mix = runs[name]["interpolation"]
        needed |= {s[len(adapters):] for s in (mix["start"], mix["end"]) if s.startswith(adapters)}
    assert {p[len(adapters):].split("/")[0] for p in KEPT} == needed
