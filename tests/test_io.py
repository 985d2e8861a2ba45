"""alignir/io.py: the package's one place for atomic writes (temp file/folder + rename) and file locks."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import alignir.io as io


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "sub" / "run.txt"
    io.atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError):
        with io.atomic_write(target, "w") as f:
            f.write("half of the new ")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.txt"]  # no temp file left
    io.atomic_write_json(target, {"b": 1, "a": [2]}, sort_keys=True)
    assert json.loads(target.read_text()) == {"a": [2], "b": 1}
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~io.umask())  # not mkstemp's 0600
    io.atomic_save_npy(tmp_path / "a.npy", np.arange(5, dtype=np.int16))
    back = np.load(tmp_path / "a.npy", allow_pickle=False)
    assert back.dtype == np.int16 and back.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="pickle"):
        io.atomic_save_npy(tmp_path / "o.npy", np.array([{}], dtype=object))
    assert not (tmp_path / "o.npy").exists()
    with pytest.raises(ValueError, match="mode"):
        with io.atomic_write(target, "a"):
            pass


@pytest.mark.parametrize("exchange", [True, False])
def test_replace_dir_swaps_a_finished_folder_in(tmp_path, monkeypatch, exchange):
    if not exchange:  # the two-rename fallback (no renameat2)
        monkeypatch.setattr(io, "exchange_paths", lambda a, b: False)
    dst, src = tmp_path / "ckpt", tmp_path / "ckpt.tmp"
    dst.mkdir()
    (dst / "old.bin").write_bytes(b"old")
    src.mkdir()
    (src / "new.bin").write_bytes(b"new")
    io.replace_dir(src, dst)
    assert [p.name for p in dst.iterdir()] == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # old version and temp gone
    fresh = tmp_path / "fresh.tmp"
    fresh.mkdir()
    io.replace_dir(fresh, tmp_path / "absent")
    assert (tmp_path / "absent").is_dir() and not fresh.exists()


def test_replace_dir_without_overwrite_never_deletes_a_full_folder(tmp_path):
    dst, src = tmp_path / "data", tmp_path / "download"
    dst.mkdir()
    (dst / "mine.txt").write_text("keep")
    src.mkdir()
    with pytest.raises(OSError) as e:
        io.replace_dir(src, dst, overwrite=False)
    assert e.value.errno in (errno.ENOTEMPTY, errno.EEXIST)
    assert (dst / "mine.txt").read_text() == "keep" and src.is_dir()


def test_sha256_file_matches_hashlib(tmp_path):
    import hashlib

    data = os.urandom(10_000)
    (tmp_path / "f").write_bytes(data)
    assert io.sha256_file(tmp_path / "f", chunk=777) == hashlib.sha256(data).hexdigest()


HOLD = """
import sys
from alignir.io import file_lock
with file_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.e2e  # the lock holder is a child Python process
def test_file_lock_waits_for_another_process_to_release_it(tmp_path):
    lock = tmp_path / "new-folder" / "model.lock"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        entered = threading.Event()

        def take() -> None:
            with io.file_lock(lock):
                entered.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        assert not entered.wait(0.5)  # the other process holds the lock
        child.stdin.write("\n")
        child.stdin.flush()
        assert entered.wait(60)
        waiter.join()
    finally:
        child.kill()
        child.wait()
    assert lock.read_text() == ""  # the lock file's content is never touched
