"""Fetching a BEIR dataset by name (retrieval/beir.py: download_beir, resolve_dataset and
`alignir beir NAME --download`) from a real HTTP server on 127.0.0.1 serving zips built here:
success, 404, a truncated body, a wrong checksum, a member escaping the folder, no server."""
from __future__ import annotations

import hashlib
import io
import json
import socket
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignir.retrieval.beir import beir_url, download_beir, load_beir, resolve_dataset
from alignir.errors import DownloadError
from conftest import share_model_cache


def _zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return buf.getvalue()


def _beir_files(prefix: str) -> dict[str, str]:
    corpus = "".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                     for i, t in enumerate(["supersonic flow over a plate", "stock market rates"]))
    queries = json.dumps({"_id": "q1", "text": "supersonic plate"}) + "\n"
    qrels = "query-id\tcorpus-id\tscore\nq1\td0\t1\n"
    return {f"{prefix}corpus.jsonl": corpus, f"{prefix}queries.jsonl": queries, f"{prefix}qrels/test.tsv": qrels}


TOY = _zip(_beir_files("toy/"))
#: path -> (status, body, Content-Length announced or None for len(body))
ROUTES: dict[str, tuple[int, bytes, int | None]] = {
    "/toy.zip": (200, TOY, None),
    "/flat.zip": (200, _zip(_beir_files("")), None),  # files at the archive's root
    "/cut.zip": (200, TOY[: len(TOY) // 2], len(TOY)),  # the connection closes mid-body
    "/slip.zip": (200, _zip({**_beir_files("slip/"), "../outside.txt": "x"}), None),
    "/abs.zip": (200, _zip({**_beir_files("abs/"), "/tmp/alignir-abs-member.txt": "x"}), None),
    "/junk.zip": (200, b"this is not a zip file", None),
    "/empty.zip": (200, _zip({"readme.txt": "no dataset here"}), None),
}


class _Handler(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.hits.append(self.path)
        status, body, length = ROUTES.get(self.path, (404, b"not found", None))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def mirror(server, monkeypatch):
    """$ALIGNIR_BEIR_URL pointing at the local server; the request log emptied."""
    monkeypatch.setenv("ALIGNIR_BEIR_URL", server)
    _Handler.hits.clear()
    return server


def _refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_beir_url_uses_the_mirror_variable(monkeypatch):
    monkeypatch.delenv("ALIGNIR_BEIR_URL", raising=False)
    assert beir_url("scifact") == "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip"
    monkeypatch.setenv("ALIGNIR_BEIR_URL", "http://mirror.example/beir/")
    assert beir_url("scifact") == "http://mirror.example/beir/scifact.zip"
    assert beir_url("nq", base="http://other") == "http://other/nq.zip"


@pytest.mark.parametrize("name", ["toy", "flat"])
def test_download_unpacks_a_dataset_atomically(mirror, tmp_path, name):
    dest = download_beir(name, tmp_path / "data", progress=False)
    assert dest == tmp_path / "data" / name
    ds = load_beir(dest)
    assert ds.qrels == {"q1": {"d0": 1}} and len(ds.corpus) == 2
    assert _leftovers(tmp_path / "data") == [name]  # no temporary folder left
    assert _Handler.hits == [f"/{name}.zip"]
    assert download_beir(name, tmp_path / "data", progress=False) == dest  # present: not fetched again
    assert _Handler.hits == [f"/{name}.zip"]


def test_download_checks_the_md5(mirror, tmp_path):
    good = hashlib.md5(TOY).hexdigest()
    assert download_beir("toy", tmp_path / "ok", md5=good.upper(), progress=False).is_dir()
    with pytest.raises(DownloadError, match=f"md5 {good} differs from the published 0{{32}}"):
        download_beir("toy", tmp_path / "bad", md5="0" * 32, progress=False)
    assert _leftovers(tmp_path / "bad") == []


def test_resolve_dataset_downloads_into_the_first_data_folder(mirror, tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("ALIGNIR_DATA", f"{first}:{second}")
    with pytest.raises(FileNotFoundError, match="--download"):
        resolve_dataset("toy")
    assert _Handler.hits == []
    assert resolve_dataset("toy", download=True) == first / "toy"
    assert resolve_dataset("toy") == first / "toy"  # found now, without a download
    assert _Handler.hits == ["/toy.zip"]


def test_resolve_dataset_downloads_into_the_cache_without_data_folders(mirror, tmp_path, monkeypatch):
    monkeypatch.delenv("ALIGNIR_DATA", raising=False)
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    assert resolve_dataset("toy", download=True) == tmp_path / "cache" / "beir" / "toy"


def test_a_missing_dataset_is_a_one_line_404(mirror, tmp_path):
    with pytest.raises(DownloadError, match=r"HTTP 404 .*no BEIR dataset named 'nosuch'") as e:
        download_beir("nosuch", tmp_path / "data", progress=False)
    assert "\n" not in str(e.value)
    assert _leftovers(tmp_path / "data") == []


def test_a_truncated_body_is_refused(mirror, tmp_path):
    with pytest.raises(DownloadError, match="cut.zip: (the transfer broke off|got .* bytes, the server announced)"):
        download_beir("cut", tmp_path / "data", progress=False)
    assert _leftovers(tmp_path / "data") == []


@pytest.mark.parametrize("name, member", [("slip", "../outside.txt"), ("abs", "/tmp/alignir-abs-member.txt")])
def test_a_member_escaping_the_folder_is_refused(mirror, tmp_path, name, member):
    with pytest.raises(DownloadError, match=f"zip member '{member}' escapes the target folder"):
        download_beir(name, tmp_path / "data", progress=False)
    assert not (tmp_path / "outside.txt").exists()
    assert _leftovers(tmp_path / "data") == []


@pytest.mark.parametrize("name, why", [("junk", "not a valid zip file"), ("empty", "holds no corpus.jsonl")])
def test_an_archive_without_a_dataset_is_refused(mirror, tmp_path, name, why):
    with pytest.raises(DownloadError, match=why):
        download_beir(name, tmp_path / "data", progress=False)
    assert _leftovers(tmp_path / "data") == []


def test_no_server_is_a_clear_offline_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ALIGNIR_BEIR_URL", _refused_url())
    with pytest.raises(DownloadError, match=r"cannot download .*toy.zip: .*refused.* \(offline\?") as e:
        download_beir("toy", tmp_path / "data", progress=False)
    assert "\n" not in str(e.value)
    assert _leftovers(tmp_path / "data") == []


def test_a_name_with_a_path_separator_is_not_a_dataset_name(tmp_path):
    with pytest.raises(ValueError, match="one path component"):
        download_beir("../toy", tmp_path / "data", progress=False)


def test_cli_beir_download_builds_and_evaluates(mirror, tmp_path, tiny_folder, monkeypatch):
    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    runner = CliRunner()
    args = ["beir", "toy", "--model", str(tiny_folder), "--index", str(tmp_path / "idx"), "--json", "--no-bm25"]
    missing = runner.invoke(app, args)
    assert missing.exit_code == 1 and "--download" in missing.output and _Handler.hits == []
    r = runner.invoke(app, [*args, "--download"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "data" / "toy" / "corpus.jsonl").is_file() and _Handler.hits == ["/toy.zip"]
    assert '"ndcg@10"' in r.stdout


def test_cli_beir_download_offline_is_one_line(tmp_path, monkeypatch):
    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_BEIR_URL", _refused_url())
    monkeypatch.setenv("ALIGNIR_DATA", str(tmp_path / "data"))
    r = CliRunner().invoke(app, ["beir", "toy", "--download", "--model", str(tmp_path / "unused")])
    assert r.exit_code == 1
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot download" in lines[0] and "offline?" in lines[0], r.output
