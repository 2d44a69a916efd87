"""Progress as a session runs: its lines printed as they come, and a live bar on a terminal."""

from __future__ import annotations

import argparse
import sys
from typing import Optional


def progress_printer(args: Optional[argparse.Namespace] = None):
    """Progress lines on stderr: under a live bar with an ETA where stderr is a terminal
    (`LiveBar`), plain lines otherwise (logs), none with -q."""
    if getattr(args, "quiet", False):
        return lambda line: None
    if sys.stderr.isatty():
        return LiveBar(sys.stderr)
    return lambda line: print(line, file=sys.stderr, flush=True)


class LiveBar:
    """Prints each progress line above one tqdm bar that follows the work under way: the trials
    ("[7/12]") or a verification's rounds ("round 3/5"), with the time left at their pace so far."""

    COUNTED = ((r"\[(\d+)/(\d+)\]", "trials"), (r"round (\d+)/(\d+)", "rounds"))

    def __init__(self, stream) -> None:
        self.stream, self.bar, self.what = stream, None, ""

    def __call__(self, line: str) -> None:
        import re

        from tqdm import tqdm

        counted = next(((int(found.group(1)), int(found.group(2)), what) for pattern, what in self.COUNTED
                        if (found := re.search(pattern, line))), None)
        if counted is not None:
            done, total, what = counted
            if self.bar is None or what != self.what or done <= self.bar.n and done == 1:
                self.close()
                self.bar, self.what = tqdm(total=total, desc=what, file=self.stream, leave=False, dynamic_ncols=True,
                                           bar_format="{desc} {bar} {n}/{total} [{elapsed}<{remaining}]"), what
            self.bar.total = max(total, done)
            self.bar.update(done - self.bar.n)
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
