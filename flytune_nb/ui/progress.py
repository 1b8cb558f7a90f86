"""A tqdm listener: "i of N, current config, its median, best so far" (what users of SGLang's tuner asked for).
One bar per (shape, dtype) in flight, so the per-GPU threads of a multi-GPU sweep do not mix their counts."""
from __future__ import annotations

import sys
import time

from flytune_nb.analysis.units import fmt_time
from flytune_nb.core.shapes import shape_text
from flytune_nb.core.events import ShapeDone, TrialDone, TrialFailed, TrialStarted

STATUS_EVERY_S = 30.0  # a log line per trial would be thousands for a GEMM space; one per half minute says it lives


def _key(shape: dict, dtype: str) -> tuple:
    return tuple(shape.items()), dtype


class TqdmListener:
    def __init__(self, file=None, disable: bool | None = None) -> None:
        self.file = file or sys.stderr
        self.disable = disable
        self.bars: dict[tuple, object] = {}
        self.in_flight: dict[tuple, tuple] = {}  # (shape, dtype) -> (config, monotonic start): what an interrupt cut

    def interrupted(self) -> list[str]:
        """The trials in flight, for the message after Ctrl-C: "N=64 fp32 {MODE: 3} (running 12 s)"."""
        now = time.monotonic()
        return [f"{' '.join(f'{k}={v}' for k, v in dict(key[0]).items())} {key[1]} {config} (running "
                f"{now - t0:.0f} s)" for key, (config, t0) in self.in_flight.items()]

    def __call__(self, event) -> None:
        from tqdm.auto import tqdm

        if isinstance(event, TrialStarted):
            key = _key(event.shape, event.dtype)
            self.in_flight[key] = (event.config, time.monotonic())
            if key not in self.bars:
                shape = shape_text(event.shape)
                self.bars[key] = tqdm(total=event.total, desc=f"{event.kernel} {shape} {event.dtype}",
                                      file=self.file, leave=True, disable=self.disable, dynamic_ncols=True)
            self.bars[key].set_postfix_str(str(event.config), refresh=False)
        elif isinstance(event, (TrialDone, TrialFailed)):
            t = event.trial
            self.in_flight.pop(_key(t.shape, t.dtype), None)
            bar = self.bars.get(_key(t.shape, t.dtype))
            if bar is None:  # replayed from the store: nothing measured, no bar
                return
            now = fmt_time(t.p50) if t.ok else t.status
            best = fmt_time(event.best.p50) if event.best is not None else "-"
            bar.set_postfix_str(f"{t.config} {now} | best {best}", refresh=False)
            bar.update(1)
        elif isinstance(event, ShapeDone):
            bar = self.bars.pop(_key(event.result.shape, event.result.dtype), None)
            if bar is not None:
                bar.close()


class LineListener:
    """Progress as whole lines for a log (``papermill --log-output``, a batch job's output), where a bar's carriage
    returns are noise: one line per finished shape (its trials, failures and pick), and at most every
    ``every_s`` seconds a line with the trials measured since the last one and each running shape's count."""

    def __init__(self, file=None, every_s: float = STATUS_EVERY_S, clock=time.monotonic) -> None:
        self.file = file or sys.stdout
        self.every_s = every_s
        self.clock = clock
        self.last = clock()
        self.measured = 0
        self.counts: dict[tuple, list] = {}  # (shape, dtype) -> [done, total, best p50]
        # what was started here: a trial the store already held comes as a TrialDone with no TrialStarted before it
        self.started: set[tuple] = set()

    def _say(self, text: str) -> None:
        print(text, file=self.file, flush=True)

    def __call__(self, event) -> None:
        if isinstance(event, TrialStarted):
            key = _key(event.shape, event.dtype)
            self.counts.setdefault(key, [0, event.total, None])
            self.started.add((key, event.config))
        elif isinstance(event, (TrialDone, TrialFailed)):
            t = event.trial
            key = _key(t.shape, t.dtype)
            c = self.counts.get(key)
            if c is None or (key, t.config) not in self.started:  # replayed from the store: nothing measured
                return
            self.started.discard((key, t.config))
            c[0] += 1
            c[2] = event.best.p50 if event.best is not None else c[2]
            self.measured += 1
            now = self.clock()
            if now - self.last >= self.every_s:
                running = "; ".join(f"{shape_text(dict(k[0]))} {k[1]} {d}/{n}"
                                    + (f" best {fmt_time(b)}" if b is not None else "")
                                    for k, (d, n, b) in self.counts.items())
                self._say(f"{self.measured} trials measured so far; running: {running}")
                self.last = now
        elif isinstance(event, ShapeDone):
            r = event.result
            key = _key(r.shape, r.dtype)
            self.counts.pop(key, None)
            self.started = {k for k in self.started if k[0] != key}
            failed = sum(not t.ok for t in r.trials)
            pick = r.pick
            why = f" ({r.selection.line()})" if r.selection is not None else ""
            self._say(f"{r.kernel} {shape_text(r.shape)} {r.dtype}: {len(r.trials)} trials, {failed} failed; "
                      + (f"pick {pick.config} {fmt_time(r.pick_ms)}{why}" if pick is not None else "none passed")
                      + (" (stopped: partial)" if r.stopped else ""))
