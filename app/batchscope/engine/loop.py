"""The house shape of a thread: one loop, a terminate flag set before the wake-up.

Why one base: the feeder, the monitor and the experiment player each own one
loop that sleeps on an event; stopping them must look the same everywhere —
the flag first, then the event, then a bounded join (never from the thread
itself). Each subclass writes only its loop (``_run``), which checks
``self._terminate`` after every wake-up and catches its own exceptions.
"""

from __future__ import annotations

import threading


class LoopThread:
    STOP_TIMEOUT_S = 2.0  # the longest ``stop()`` waits by default

    def __init__(self, name: str) -> None:
        self._terminate = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Set the flag, wake the loop, wait up to ``timeout`` s for it to end."""
        self._terminate = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.STOP_TIMEOUT_S if timeout is None else timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError
