"""One base class for the errors a user can cause: the CLI prints those (and
OSError) as one line with exit status 1, and shows the traceback of anything else (a bug),
and of everything under -v."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

import alignir
from alignir.errors import AlignirError, InvalidInputError
from alignir.retrieval.cli import app

runner = CliRunner()


def test_public_errors_share_the_base():
    for name in ("NotAnIndexError", "CorruptIndexError", "UnsupportedFormatError", "FingerprintMismatch",
                 "IndexWriteError", "IndexReadError", "BeirFormatError", "ModelNotFoundError"):
        assert issubclass(getattr(alignir, name), AlignirError), name
    assert issubclass(InvalidInputError, ValueError)  # `except ValueError` callers keep working


def test_every_error_class_lives_in_the_errors_module_and_is_exported():
    """No module but alignir.errors defines an exception class (warnings aside), and each class
    there is alignir.X."""
    import ast
    from pathlib import Path

    import alignir.errors as errors

    root = Path(__file__).resolve().parents[1]
    exceptions = {"Exception", "ValueError", "OSError", "RuntimeError", "KeyError", "TypeError", *errors.__all__}
    elsewhere = []
    for folder in ("encoders", "index", "retrieval", "src"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == Path(errors.__file__).resolve():
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in getattr(node, "bases", [])}
                if isinstance(node, ast.ClassDef) and bases & exceptions:
                    elsewhere.append(f"{path.relative_to(root)}: {node.name}")
    assert elsewhere == []
    defined = sorted(n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception))
    assert defined == sorted(errors.__all__)
    assert all(getattr(alignir, n) is getattr(errors, n) and issubclass(getattr(errors, n), AlignirError)
               for n in defined)


def test_validation_errors_are_user_errors():
    with pytest.raises(AlignirError):
        alignir.SparseConfig(doc_k=0)


def test_user_error_is_one_line(tmp_path):
    r = runner.invoke(app, ["info", "--index", str(tmp_path)])
    assert r.exit_code == 1
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output


def test_missing_file_is_one_line(tmp_path):
    r = runner.invoke(app, ["info", "--index", str(tmp_path / "nowhere")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1, r.output


def _bug(*_a, **_k):
    raise ValueError("an internal bug, not the user's fault")


def test_a_bug_shows_its_traceback(tmp_path, monkeypatch):
    import alignir.index.manifest_io as manifest_io

    monkeypatch.setattr(manifest_io, "read_manifest", _bug)
    r = runner.invoke(app, ["info", "--index", str(tmp_path)])
    assert r.exit_code == 1 and isinstance(r.exception, ValueError)
    assert "internal bug" in str(r.exception)


def test_verbose_shows_the_traceback_of_a_user_error(tmp_path):
    r = runner.invoke(app, ["resparsify", "--index", str(tmp_path), "--doc-k", "10", "-v"])
    assert r.exit_code == 1 and isinstance(r.exception, AlignirError)


def test_an_oserror_without_a_file_has_no_stray_brackets(tmp_path, monkeypatch):
    import errno

    import alignir.index.manifest_io as manifest_io

    def disk_full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest_io, "read_manifest", disk_full)
    r = runner.invoke(app, ["info", "--index", str(tmp_path)])
    assert r.exit_code == 1 and r.output.strip() == "error: No space left on device", r.output
