"""The Milvus 2.5 C++ engine as a loopback gRPC server: fetched once, started and stopped here.

PyPI ``milvus-lite`` 2.5.1 bundles the Milvus 2.5 C++ engine as a ``milvus`` binary (with its
``lib/``). :func:`fetch` downloads that one wheel (``pip download --no-deps``), checks its sha256
and unpacks only the binary and its libraries into a cache folder
(``~/.cache/alignir/milvus-engine-2.5.1``, or ``$ALIGNIR_MILVUS_ENGINE``); nothing is installed
beside the ``milvus-lite`` 3.x package the embedded ``.db`` backend uses.

:class:`MilvusEngine` runs it on ``127.0.0.1:PORT`` (a free port unless given) over a data
folder, waits until it answers, and stops it (SIGTERM, then SIGKILL). A C++ gRPC server built
without keepalive settings, it answers pymilvus' 10-s idle pings as Milvus Lite does (GOAWAY
"too_many_pings"), so ``connect`` gives connections to it (a loopback address) Milvus Lite's
keepalive options::

    with MilvusEngine("/data/milvus") as engine:            # or engine.start() / engine.stop()
        export_index("indexes/adi", engine.uri)               # uri = "http://127.0.0.1:PORT"

From a shell (the server stays up until Ctrl-C; ``alignir export milvus --uri URI`` and
``alignir search --backend milvus --uri URI`` then use it)::

    python -m alignir.retrieval.milvus_engine fetch
    python -m alignir.retrieval.milvus_engine serve --data /data/milvus [--port 19530]

This engine keeps no collection properties (and refuses to alter them): an export records its
manifest and completion mark in a metadata collection instead (retrieval/milvus_meta.py).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from alignir.errors import MilvusError

__all__ = ["VERSION", "WHEEL_SHA256", "MilvusEngine", "engine_dir", "fetch", "unavailable_reason"]

VERSION = "2.5.1"
WHEEL = f"milvus_lite-{VERSION}-py3-none-manylinux2014_x86_64.whl"
#: sha256 of the PyPI wheel above (the only platform this engine is built for here)
WHEEL_SHA256 = "25ce13f4b8d46876dd2b7ac8563d7d8306da7ff3999bb0d14b116b30f71d706c"
#: the unpacked folder records the wheel's sha256 in this file, written last
STAMP = "WHEEL_SHA256"
LIB_PREFIX = "milvus_lite/lib/"
DB_NAME = "milvus.db"


def engine_dir() -> Path:
    """Where the engine is unpacked: ``$ALIGNIR_MILVUS_ENGINE``, else the user's cache folder."""
    if os.environ.get("ALIGNIR_MILVUS_ENGINE"):
        return Path(os.environ["ALIGNIR_MILVUS_ENGINE"]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "alignir" / f"milvus-engine-{VERSION}"


def _platform_reason() -> str | None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"the Milvus {VERSION} engine of PyPI milvus-lite is built for Linux x86_64, not {sys.platform} " \
               f"{platform.machine()}"
    return None


def unavailable_reason(folder: Path | None = None) -> str | None:
    """Why the engine cannot be run here (None: it can): another platform, or not fetched yet."""
    reason = _platform_reason()
    if reason:
        return reason
    folder = folder or engine_dir()
    stamp = folder / STAMP
    if not (folder / "milvus").is_file() or not stamp.is_file() or stamp.read_text().strip() != WHEEL_SHA256:
        return f"the Milvus {VERSION} engine is not fetched into {folder}: run scripts/fetch_milvus_engine.sh"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(folder: Path | None = None, wheel: Path | None = None) -> Path:
    """Unpack the engine into ``folder`` (default :func:`engine_dir`) unless it is there already;
    ``wheel``: a downloaded milvus-lite 2.5.1 wheel (else ``pip download`` fetches it). The wheel's
    sha256 must be :data:`WHEEL_SHA256`. Returns the folder."""
    folder = folder or engine_dir()
    if unavailable_reason(folder) is None:
        return folder
    reason = _platform_reason()
    if reason:
        raise MilvusError(reason)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as tmp:
        if wheel is None:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--disable-pip-version-check", "-q", f"milvus-lite=={VERSION}", "-d", tmp],
                                  capture_output=True, text=True)
            wheel = Path(tmp) / WHEEL
            if proc.returncode != 0 or not wheel.is_file():
                tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
                raise MilvusError(f"could not download milvus-lite=={VERSION} ({WHEEL}): {tail}")
        got = _sha256(wheel)
        if got != WHEEL_SHA256:
            raise MilvusError(f"{wheel} has sha256 {got}, expected {WHEEL_SHA256}: not the milvus-lite {VERSION} wheel")
        out = Path(tmp) / "engine"
        out.mkdir()
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                name = member[len(LIB_PREFIX):]
                if member.startswith(LIB_PREFIX) and name and "/" not in name:
                    with zf.open(member) as src, open(out / name, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        (out / "milvus").chmod(0o755)
        (out / STAMP).write_text(WHEEL_SHA256 + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(out, folder)
    return folder


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the process that started it dies (a killed test
    run leaves no server behind; Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the engine may still lose it to a race: start retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class MilvusEngine:
    """The engine serving ``data_dir`` on ``127.0.0.1:port`` (a free port when None).

    :meth:`start` returns once the server answers a gRPC call; :meth:`stop` ends it (SIGTERM,
    SIGKILL after ``grace`` seconds); :meth:`kill` SIGKILLs it (a crash); :meth:`restart` starts
    it again on the same port and data. Its log is ``data_dir/engine.log``."""

    def __init__(self, data_dir: str | Path, port: int | None = None, *, folder: Path | None = None,
                 log_level: str = "ERROR") -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.folder = folder or engine_dir()
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        if self.port is None:
            raise MilvusError("the Milvus engine has not been started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "engine.log"

    def start(self, timeout: float = 60.0) -> "MilvusEngine":
        reason = unavailable_reason(self.folder)
        if reason:
            raise MilvusError(reason)
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None
        for _ in range(1 if fixed else 3):
            port = self.port if fixed else free_port()
            self._spawn(port)
            if self._wait_ready(port, timeout):
                self.port = port
                return self
        raise MilvusError(f"the Milvus engine did not start on 127.0.0.1:{port}: {self._log_tail()}")

    def _spawn(self, port: int) -> None:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(self.folder), env.get("LD_LIBRARY_PATH")) if p)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(self.folder / "milvus"), str(self.data_dir / DB_NAME),
                                          f"127.0.0.1:{port}", self.log_level],
                                         cwd=self.data_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def _wait_ready(self, port: int, timeout: float) -> bool:
        """Until the server answers list_collections; False when the process ended first. The
        probe uses :func:`grpc_options` as ``connect`` does: pymilvus keeps the probe's channel and
        its options for every later client of the same address."""
        from pymilvus import MilvusClient

        from alignir.retrieval.milvus import grpc_options

        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = None
                return False
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                client = MilvusClient(uri=uri, timeout=5, grpc_options=grpc_options(uri))
                try:
                    client.list_collections()
                finally:
                    client.close()
                return True
            except Exception:  # not listening yet: the client raises its own and grpc errors alike
                time.sleep(0.2)
        self.stop()
        raise MilvusError(f"the Milvus engine on 127.0.0.1:{port} did not answer within {timeout:.0f} s: "
                          f"{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " ".join(" | ".join(lines[-3:]).split())[-400:] or "an empty log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 15.0) -> None:
        """End the server (SIGTERM; SIGKILL if it has not ended after ``grace`` seconds)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the server (a crash: what it had not written is lost)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def restart(self, timeout: float = 60.0) -> "MilvusEngine":
        """Stop (when running) and start again on the same port and data folder."""
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "MilvusEngine":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m alignir.retrieval.milvus_engine", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help=f"download milvus-lite {VERSION} once and unpack its engine")
    f.add_argument("--folder", type=Path, default=None, help="where to unpack (default: %(default)s → the cache)")
    f.add_argument("--wheel", type=Path, default=None, help="a downloaded milvus-lite 2.5.1 wheel")
    s = sub.add_parser("serve", help="run the engine on 127.0.0.1 until Ctrl-C")
    s.add_argument("--data", type=Path, required=True, help="the data folder (created when missing)")
    s.add_argument("--port", type=int, default=None, help="the port (default: a free one)")
    args = ap.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(args.folder, args.wheel))
            return 0
        engine = MilvusEngine(args.data, args.port).start()
    except MilvusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(engine.uri, flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stops the engine on the way out
    try:
        while engine.running:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
