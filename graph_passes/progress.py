"""A plain-text progress bar on stderr (no dependency). Redraws in place on a terminal, prints ~10 lines otherwise."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, total: int, label: str = "quantizing", stream=None, enabled: bool = True, width: int = 30):
        self.total = max(0, int(total))
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and self.total > 0
        self.width = width
        self.done = 0
        self.start = time.monotonic()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_decile = -1

    def update(self, item: str = "", step: int = 1) -> None:
        self.done = min(self.total, self.done + step)
        if not self.enabled:
            return
        frac = self.done / self.total
        if not self._tty:
            decile = int(frac * 10)
            if decile == self._last_decile and self.done != self.total:
                return
            self._last_decile = decile
        fill = int(round(frac * self.width))
        line = (f"{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {self.done}/{self.total} "
                f"{time.monotonic() - self.start:5.1f}s {item}")
        if self._tty:
            self.stream.write("\r" + line[:120].ljust(120))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
