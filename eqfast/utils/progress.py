"""A small dependency-free progress bar for long CLI jobs (eqfast does not depend on tqdm).

    with Progress(total=n_games, desc="generate", unit="games") as bar:
        for batch in batches:
            ...
            bar.update(len(batch), loss=loss)

On a terminal it redraws one line in place (`\\r`) at most `min_interval` seconds apart
(10 times a second by default); in a log file or CI (not a TTY) it prints a plain line
every `log_interval` seconds and once more at close, so logs stay short and readable:

    generate: 3200/10000 (32.0%) 812.4 games/s elapsed 0:00:03 eta 0:00:08 loss=0.0412
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def format_duration(seconds: float) -> str:
    """h:mm:ss (hours unbounded)."""
    s = int(max(seconds, 0.0) + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _format_value(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _format_rate(rate: float) -> str:
    return f"{rate:.1f}" if rate < 100 else f"{rate:.0f}"


class Progress:
    """Count/total, rate, ETA and `key=value` postfix fields, drawn to `stream`.

    total: expected count (None: unknown, no percentage or ETA). unit: what is counted
    (the rate reads "<unit>/s"). disable: count but draw nothing. clock: seconds source
    (tests pass a fake one).
    """

    def __init__(self, total: int | None = None, desc: str = "", unit: str = "it",
                 stream: TextIO | None = None, disable: bool = False,
                 min_interval: float = 0.1, log_interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        if total is not None and total < 0:
            raise ValueError(f"total must be >= 0 or None, got {total}")
        self.total = total
        self.desc = desc
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.disable = disable
        self.clock = clock
        self.n = 0
        self.postfix: dict = {}
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        # a terminal redraws in place, so it can afford frequent updates; a log cannot
        self.interval = min_interval if self.tty else log_interval
        self.start = clock()
        self._last_draw = self.start
        self._width = 0  # length of the last in-place line, to blank leftovers
        self._drawn = None  # (count, fields) of the last line drawn
        self.closed = False

    # ------------------------------------------------------------------ public
    def update(self, n: int = 1, **postfix) -> None:
        """Count `n` more units and set any postfix fields (e.g. loss=0.12)."""
        self.n += n
        self.postfix.update(postfix)
        if self.disable or self.closed:
            return
        now = self.clock()
        if now - self._last_draw >= self.interval or (self.tty and self.n == self.total):
            self._draw(now)

    def set_postfix(self, **postfix) -> None:
        """Set postfix fields without counting (shown at the next redraw)."""
        self.postfix.update(postfix)

    def close(self) -> None:
        """Draw the final state once and end the line. Safe to call twice."""
        if self.closed:
            return
        # a log already holding the final count and fields gets no second copy of that line
        if not self.disable and (self.tty or self._drawn != self._state()):
            self._draw(self.clock(), final=True)
        self.closed = True

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ drawing
    def line(self, now: float | None = None) -> str:
        """The status text at time `now` (default: the clock's now)."""
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 0.0)
        rate = self.n / elapsed if elapsed > 0 else 0.0
        parts = []
        if self.total is not None:
            pct = 100.0 * self.n / self.total if self.total else 100.0
            parts.append(f"{self.n}/{self.total} ({pct:.1f}%)")
        else:
            parts.append(f"{self.n} {self.unit}")
        parts.append(f"{_format_rate(rate)} {self.unit}/s")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.total is not None and self.n < self.total:
            eta = format_duration((self.total - self.n) / rate) if rate > 0 else "?"
            parts.append(f"eta {eta}")
        parts += [f"{k}={_format_value(v)}" for k, v in self.postfix.items()]
        text = " ".join(parts)
        return f"{self.desc}: {text}" if self.desc else text

    def _draw(self, now: float, final: bool = False) -> None:
        text = self.line(now)
        if self.tty:
            pad = " " * max(self._width - len(text), 0)
            self.stream.write("\r" + text + pad + ("\n" if final else ""))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._last_draw = now
        self._drawn = self._state()

    def _state(self) -> tuple:
        return self.n, tuple((k, repr(v)) for k, v in self.postfix.items())


__all__ = ["Progress", "format_duration"]
