"""Run a server: bind the socket first (so ``--port 0`` picks a free port and the line printed
names it), then hand it to uvicorn, which on SIGTERM or SIGINT stops accepting and lets the
requests in flight finish (up to ``drain_seconds``) before the process exits."""
from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from typing import Any, Iterator

#: how long SIGTERM waits for requests in flight
DRAIN_SECONDS = 30


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only then (without
    # it a response's body waits ~40 ms for the client's delayed ACK of its head)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _draining_server_class() -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, exiting with status 0 after a drain (uvicorn re-raises the signal)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return DrainingServer


def serve(app: Any, sock: socket.socket, *, drain_seconds: float = DRAIN_SECONDS, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` until SIGTERM/SIGINT, then drain."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=drain_seconds,
                            server_header=False, proxy_headers=False, lifespan="on")
    server = _draining_server_class()(config)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"alignir serve: listening on http://{shown}:{port}", file=sys.stderr, flush=True)
    server.run(sockets=[sock])


class ServerThread:
    """``app`` served on a free loopback port by a uvicorn thread of this process (tests and the
    load benchmark); ``url`` once started; :meth:`stop` drains and joins."""

    def __init__(self, app: Any, host: str = "127.0.0.1", log_level: str = "warning") -> None:
        import uvicorn

        self.sock = bind(host, 0)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="on",
                                                    timeout_graceful_shutdown=DRAIN_SECONDS))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 60.0) -> "ServerThread":
        import time

        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=DRAIN_SECONDS + 5)
        self.sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
