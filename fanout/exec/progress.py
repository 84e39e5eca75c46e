"""Progress of long work, on and off a terminal: `reporter(done, total)` is the callback the pipelines take.

On a TTY it draws a tqdm bar; otherwise (cron, CI, a log file) a timer thread writes one line every
`interval` seconds from the first call on, whether or not work moved since (a slow first group still shows
signs of life), and `close()` writes the last one: `embedding: 640/2113 chunks (30%), 9.8 chunks/s, ETA 2m30s`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any, Self

PLURAL = {"query": "queries"}
# what an index run's line says before its first group of chunks is written (the embedder loads first)
EMBED_STARTING = "loading the embedding model and embedding the first group"


def _dur(s: float) -> str:
    s = round(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """Callable `(done, total)`; `close()` ends the bar or writes the final line."""

    def __init__(self, desc: str, unit: str, stream: IO[str] | None = None, interval: float = 10.0,
                 tty: bool | None = None, starting: str = ""):
        """`starting`: what the line says until the first unit is done (e.g. loading the model and the first
        batch), instead of a rate of 0.0."""
        self.desc, self.unit, self.interval, self.starting = desc, unit, interval, starting
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.t0 = time.monotonic()
        self.done = self.total = 0
        self.bar: Any = None  # a tqdm bar (tqdm ships no types), made on the first update on a TTY
        self.lines = 0  # one-line updates written (off a TTY)
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._write = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.tty:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit=self.unit, desc=self.desc, leave=False, file=self.stream)
            self.bar.total = total
            self.bar.set_description(f"{self.desc} ({self.starting})" if done == 0 and self.starting
                                     else self.desc, refresh=False)
            self.bar.update(done - self.bar.n)
            return
        if self._timer is None:
            self._timer = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._timer.start()

    def _tick(self) -> None:
        while not self._stop.wait(max(self.interval, 0.01)):
            if self.done < self.total:
                self._line(time.monotonic())

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        secs = max(now - self.t0, 1e-9)
        units = PLURAL.get(self.unit, self.unit + "s")
        if self.done == 0 and self.starting:  # nothing finished yet: say what is happening, not "0.0/s"
            return f"{self.desc}: 0/{self.total} {units}, {self.starting}, {_dur(secs)} elapsed"
        rate = self.done / secs
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        eta = f", ETA {_dur((self.total - self.done) / rate)}" if rate > 0 and self.done < self.total else ""
        return (f"{self.desc}: {self.done}/{self.total} {units}{pct}, {rate:.1f} {units}/s{eta}, "
                f"{_dur(secs)} elapsed")

    def _line(self, now: float) -> None:
        with self._write:
            print(self.line(now), file=self.stream, flush=True)
            self.lines += 1

    def close(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif not self.tty and self.total:
            self._line(time.monotonic())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
