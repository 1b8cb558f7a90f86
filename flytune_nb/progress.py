"""A tqdm listener: "i of N, current config, its median, best so far" (what users of SGLang's tuner asked for)."""
from __future__ import annotations

import sys

from .events import ShapeDone, TrialDone, TrialFailed, TrialStarted


class TqdmListener:
    def __init__(self, file=None, disable: bool | None = None) -> None:
        self.file = file or sys.stderr
        self.disable = disable
        self.bar = None

    def __call__(self, event) -> None:
        from tqdm.auto import tqdm

        if isinstance(event, TrialStarted):
            if self.bar is None:
                shape = " ".join(f"{k}={v}" for k, v in event.shape.items())
                self.bar = tqdm(total=event.total, desc=f"{event.kernel} {shape} {event.dtype}", file=self.file,
                                leave=True, disable=self.disable, dynamic_ncols=True)
            self.bar.set_postfix_str(str(event.config), refresh=False)
        elif isinstance(event, (TrialDone, TrialFailed)) and self.bar is not None:
            t = event.trial
            now = f"{t.p50 * 1e3:.1f}us" if t.ok else t.status
            best = f"{event.best.p50 * 1e3:.1f}us" if event.best is not None else "-"
            self.bar.set_postfix_str(f"{t.config} {now} | best {best}", refresh=False)
            self.bar.update(1)
        elif isinstance(event, ShapeDone) and self.bar is not None:
            self.bar.close()
            self.bar = None
