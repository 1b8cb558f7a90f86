"""The heuristic editor: the kernel's default rule as code, re-scored on every edit against the stored sweep data.

Re-scoring never re-runs anything: each shape's new pick is looked up among the measured trials. Picks that were
never measured are listed, with a button to measure just those. Save writes the edit to the kernel's heuristic.py
(or another file) — the previous text is kept beside it as heuristic.py.bak.
"""
from __future__ import annotations

import html
import inspect
import math
from pathlib import Path

import ipywidgets as W

from flytune_nb.analysis.heuristic_edit import HeuristicError, load_heuristic, rescore
from flytune_nb.ui.notebook.controls import error_html


class HeuristicEditor(W.VBox):
    def __init__(self, spec_getter, results_getter, device_getter, measure=None) -> None:
        self.spec_getter, self.results_getter, self.device_getter = spec_getter, results_getter, device_getter
        self.measure = measure  # fn(list of (shape, dtype, config)) -> None: times configs never measured
        self.code = W.Textarea(layout=W.Layout(width="100%", height="260px"), continuous_update=False)
        self.score_button = W.Button(description="Re-score", icon="refresh")
        self.measure_button = W.Button(description="Measure missing", icon="flask", disabled=True)
        self.save_path = W.Text(description="save to", layout=W.Layout(width="60%"))
        self.save_button = W.Button(description="Save", icon="save")
        self.result = W.HTML()
        self.note = W.HTML("<small>Saving into the kernel's folder changes its source fingerprint, which is part of "
                           "the tuning key: stored timings stay in the store, but the next sweep measures again under "
                           "the new key. Save elsewhere to keep a draft.</small>")
        super().__init__([self.code, W.HBox([self.score_button, self.measure_button]),
                          W.HBox([self.save_path, self.save_button]), self.note, self.result])
        self.score_button.on_click(lambda _: self.score())
        self.measure_button.on_click(lambda _: self._measure_missing())
        self.save_button.on_click(lambda _: self.save())
        self.code.observe(lambda _: self.score(), "value")
        self.last = None
        self.load()

    def load(self) -> None:
        spec = self.spec_getter()
        path = Path(inspect.getsourcefile(inspect.unwrap(spec.default)))  # the registry may wrap it (canonical)
        self.save_path.value = str(path)
        self.code.value = path.read_text()

    def _package(self) -> str | None:
        import sys

        module = sys.modules.get(self.spec_getter().default.__module__)
        return getattr(module, "__package__", None)

    def score(self):
        results = [r for r in self.results_getter() if r.best is not None]
        if not results:
            self.result.value = "<i>run a sweep first: the edit is scored on its stored timings</i>"
            return None
        try:
            fn = load_heuristic(self.code.value, package=self._package())
            self.last = rescore(fn, results, self.device_getter(), self.spec_getter().canonical)
        except HeuristicError as e:
            self.last = None
            self.measure_button.disabled = True
            self.result.value = error_html(f"heuristic: {e}")
            return None
        s = self.last.summary()
        ratio = lambda v: "-" if v != v else ("inf (a pick fails)" if v == math.inf else f"{v:.3f}x")  # noqa: E731
        us = lambda v: "never measured" if math.isnan(v) else ("failed" if math.isinf(v) else f"{v * 1e3:.2f} us")  # noqa: E731
        rows = "".join(
            f"<tr><td>{html.escape(' '.join(f'{k}={v}' for k, v in r.shape.items()))} {r.dtype}</td>"
            f"<td><code>{html.escape(str(r.old))}</code> {us(r.old_ms)}</td>"
            f"<td><code>{html.escape(str(r.new))}</code> {us(r.new_ms)}</td><td>{us(r.best_ms)}</td>"
            f"<td><b>{r.verdict}</b></td></tr>" for r in self.last.rows)
        self.result.value = (
            f"<p>edited rule vs current: <b>{s['wins']}</b> wins, <b>{s['loses']}</b> losses, "
            f"<b>{s['fails']}</b> picks that fail, {s['ties']} ties, {s['same']} unchanged, {s['unmeasured']} never "
            f"measured. Regret (geomean vs best, over the {s['compared']} shapes both rules have timings for): "
            f"current {ratio(s['old_regret'])}, edited {ratio(s['new_regret'])}.</p><table><tr><th>shape</th>"
            f"<th>current</th>"
            f"<th>edited</th><th>best</th><th></th></tr>{rows}</table>")
        self.measure_button.disabled = not (self.last.unmeasured and self.measure)
        return self.last

    def _measure_missing(self) -> None:
        """Hands the never-measured picks to the workbench, which times them in its isolated workers off the cell
        and calls ``score`` again when they are stored."""
        if self.last and self.measure:
            self.measure_button.disabled = True
            self.measure(self.last.unmeasured)

    def save(self) -> None:
        try:
            load_heuristic(self.code.value, package=self._package())  # never save code that does not load
            if not self.save_path.value.strip():
                raise HeuristicError("choose a file to save to")
            path = Path(self.save_path.value.strip())
            if path.exists():
                path.with_suffix(path.suffix + ".bak").write_text(path.read_text())
            path.write_text(self.code.value)
            self.result.value += f"<p>saved to <code>{html.escape(str(path))}</code></p>"
        except (HeuristicError, OSError, ValueError) as e:
            self.result.value = error_html(f"not saved: {e}")
