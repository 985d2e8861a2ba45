"""Stop a training run cleanly on SIGTERM or Ctrl-C: the step in flight finishes, a checkpoint is
saved, and rerunning the same command continues exactly (a preempted job, a scheduler's time
limit, a session that ends, a user who wants the machine back).

A second signal while the first is being honoured aborts at once (``KeyboardInterrupt``), without
the checkpoint: the run then resumes from its last ``save_every`` checkpoint.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["StopRequest", "stop_on_signals", "signal_exit_code", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Truthy once a stop signal arrived; ``signal`` names it (``"SIGTERM"``)."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def __bool__(self) -> bool:
        return self.signal is not None


@contextlib.contextmanager
def stop_on_signals(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[StopRequest]:
    """Within the block, ``signals`` set the yielded :class:`StopRequest` instead of killing the
    process; the caller polls it between steps. The previous handlers come back on exit. Outside
    the main thread (where Python cannot install handlers) the request simply never fires."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, frame) -> None:
        if request:  # asked twice: abort now
            raise KeyboardInterrupt
        request.signal = signal.Signals(signum).name
        print(f"\n{request.signal}: finishing this step, saving a checkpoint, then stopping "
              f"(send it again to abort without saving)", file=sys.stderr, flush=True)

    previous = {s: signal.getsignal(s) for s in signals}
    for s in signals:
        signal.signal(s, handler)
    try:
        yield request
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def signal_exit_code(name: str) -> int:
    """The shell's exit code for a process ended by signal ``name`` (128 + its number): 130 for
    SIGINT, 143 for SIGTERM, so scripts chained with ``&&`` do not go on with an unfinished run."""
    return 128 + int(signal.Signals[name])
