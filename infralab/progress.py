"""Progress of a long command on stderr, shown the way the reader will see it.

On a terminal (stderr is a TTY) it is tqdm's bar, redrawn in place. Anywhere else (a log file, a
pipe, CI) a redrawn bar would leave one carriage-return-separated line per update, so it is a plain
line per `step_percent` of the work instead ("sweep pd: 40% (12/30 runs)"), and nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

STEP_PERCENT = 10  # a plain line each time another 10 % of the work is done


@contextmanager
def progress(
    total: int, desc: str, unit: str, enabled: bool = True, stream: TextIO | None = None,
    step_percent: int = STEP_PERCENT,
) -> Iterator[Callable[[], None]]:
    """A function to call once per finished item of `total` (no output when not `enabled` or
    `total` is 0). `stream` defaults to sys.stderr, looked up when the context opens."""
    stream = sys.stderr if stream is None else stream
    if not enabled or total <= 0:
        yield lambda: None
        return
    if _is_terminal(stream):
        from tqdm import tqdm

        with tqdm(total=total, desc=desc, unit=unit, file=stream) as bar:
            yield lambda: bar.update(1)
        return
    yield _plain_lines(total, desc, unit, stream, step_percent)


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _plain_lines(total: int, desc: str, unit: str, stream: TextIO, step_percent: int) -> Callable[[], None]:
    """One line whenever the finished share crosses the next multiple of `step_percent` (and at
    100 %), so that a log gets at most 100 / step_percent + 1 lines whatever `total` is."""
    done = 0
    shown = 0  # the last percentage printed

    def update() -> None:
        nonlocal done, shown
        done += 1
        percent = 100 * done // total
        if percent >= shown + step_percent or done == total:
            shown = percent - percent % step_percent if done < total else 100
            stream.write(f"{desc}: {percent}% ({done}/{total} {unit}s)\n")
            stream.flush()

    return update
