"""Progress of the quantization on stderr: a tqdm bar on a terminal; otherwise (a log file, CI, a pipe) a quiet
line-based log, one line per tenth of the work, that leaves no carriage returns in the file."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, total: int, label: str = "quantizing", stream=None, enabled: bool = True):
        self.total = max(0, int(total))
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and self.total > 0
        self.done = 0
        self.start = time.monotonic()
        self._bar = None
        self._last_decile = -1
        if self.enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=label, file=self.stream, unit="node", dynamic_ncols=True,
                             leave=True)

    def update(self, item: str = "", step: int = 1) -> None:
        self.done = min(self.total, self.done + step)
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(item, refresh=False)
            self._bar.update(step)
            if self.done == self.total:
                self._bar.close()
            return
        decile = self.done * 10 // self.total
        if decile == self._last_decile and self.done != self.total:
            return
        self._last_decile = decile
        from tqdm import tqdm

        elapsed = tqdm.format_interval(time.monotonic() - self.start)
        self.stream.write(f"{self.label} [{self.done}/{self.total}] {100 * self.done // self.total:3d}% "
                          f"{elapsed} {item}\n")
        self.stream.flush()
