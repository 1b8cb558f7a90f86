"""The heuristic editor: the kernel's default rule as code, re-scored on every edit against the stored sweep data.

Re-scoring never re-runs anything: each shape's new pick is looked up among the measured trials. The edited rule runs
in a thread with a time limit (analysis.heuristic_edit.with_time_limit), never on the kernel's main thread, so a rule
that loops forever costs two seconds and a red line, not a frozen notebook. A pick that names knobs the kernel does
not have is refused at once. Picks never measured are listed, with a button to measure them beside the default and
the best, fresh, so the verdict compares timings taken together.

Save writes to a file of the user's (``<kernel>_heuristic.py`` beside the notebook) unless "into the kernel's
folder" is ticked: the kernel's own heuristic.py is part of its source fingerprint, which keys every stored trial.
"""
from __future__ import annotations

import html
import inspect
import math
from pathlib import Path

import ipywidgets as W

from flytune_nb.analysis.heuristic_edit import HeuristicError, load_heuristic, rescore, with_time_limit
from flytune_nb.analysis.units import fmt_time
from flytune_nb.ui.notebook.controls import error_html


class HeuristicEditor(W.VBox):
    def __init__(self, spec_getter, results_getter, device_getter, measure=None, time_limit: float | None = None) -> None:
        self.spec_getter, self.results_getter, self.device_getter = spec_getter, results_getter, device_getter
        self.measure = measure  # fn(list of (shape, dtype, config)) -> thread: times configs never measured
        self.time_limit = time_limit
        self.code = W.Textarea(layout=W.Layout(width="100%", height="260px"), continuous_update=False)
        self.score_button = W.Button(description="Re-score", icon="refresh")
        self.measure_button = W.Button(description="Measure missing", icon="flask", disabled=True,
                                       tooltip="time the picks never measured, with the default and best beside them")
        self.save_path = W.Text(description="save to", layout=W.Layout(width="60%"))
        self.into_kernel = W.Checkbox(description="into the kernel's folder", value=False, indent=False)
        self.save_button = W.Button(description="Save", icon="save")
        self.result = W.HTML()
        self.note = W.HTML()
        super().__init__([self.code, W.HBox([self.score_button, self.measure_button]),
                          W.HBox([self.save_path, self.into_kernel, self.save_button]), self.note, self.result])
        self.score_button.on_click(lambda _: self.score())
        self.measure_button.on_click(lambda _: self._measure_missing())
        self.save_button.on_click(lambda _: self.save())
        self.into_kernel.observe(lambda _: self._target_changed(), "value")
        self.code.observe(lambda _: self.score(), "value")
        self.last = None
        # the workbench's line, while it shows no results, when the store holds the grid's: Run shows them
        self.stored_note = ""
        self._scored = ""  # what the last re-score showed: a save's line goes under it, replacing the previous save's
        # kernel name -> an edit that differed from its saved rule when another kernel was picked: brought back when
        # that kernel is picked again (the textarea is the only copy of it)
        self._unsaved: dict[str, str] = {}
        # kernel name -> the text last saved for it, wherever it went: the 'save to' box may name a file load() does
        # not read, and an edit written there is saved
        self._saved: dict[str, str] = {}
        self._shown: tuple | None = None  # (kernel name, its user file, its kernel file) of the rule shown
        self.load()

    def _kernel_file(self) -> Path:
        spec = self.spec_getter()
        return Path(inspect.getsourcefile(inspect.unwrap(spec.default)))  # the registry may wrap it (canonical)

    def _user_file(self) -> Path:
        return Path(f"{self.spec_getter().name}_heuristic.py")

    @staticmethod
    def _saved_rule(user: Path, kernel: Path) -> str:
        return user.read_text() if user.is_file() else kernel.read_text()

    def load(self) -> None:
        """The kernel's rule as it is (or the user's saved draft of it, or the edit left unsaved when another kernel
        was picked), saving to the user's file."""
        if self._shown is not None:
            name, user, kernel = self._shown
            try:
                saved = self._saved_rule(user, kernel)
            except OSError:
                saved = None
            if self.code.value not in (saved, self._saved.get(name)):
                self._unsaved[name] = self.code.value
        self.into_kernel.value = False
        name, user, kernel = self.spec_getter().name, self._user_file(), self._kernel_file()
        self._shown = (name, user.resolve(), kernel)
        self.save_path.value = str(user)
        unsaved = self._unsaved.pop(name, None)
        self.code.value = unsaved if unsaved is not None else self._saved_rule(user, kernel)
        self._target_changed()
        if unsaved is not None:
            self.note.value = (f"<small>&#9888; your edit of {html.escape(name)}'s rule, not saved, is back as you left "
                               f"it; Save keeps it.</small><br>" + self.note.value)

    def _target_changed(self) -> None:
        if self.into_kernel.value:
            self.save_path.value = str(self._kernel_file())
            self.note.value = ("<small style='color:#b35900'>&#9888; Saving into the kernel's folder changes its "
                               "source fingerprint, part of the tuning key: stored timings stay in the store, but the "
                               "next sweep measures again under the new key (and the committed exports go stale)."
                               "</small>")
        else:
            if self.save_path.value == str(self._kernel_file()):
                self.save_path.value = str(self._user_file())
            self.note.value = ("<small>Saved to a file of yours; tick <i>into the kernel's folder</i> to change the "
                               "kernel itself.</small>")

    def _package(self) -> str | None:
        import sys

        module = sys.modules.get(self.spec_getter().default.__module__)
        return getattr(module, "__package__", None)

    def score(self):
        results = [r for r in self.results_getter() if r.best is not None]
        if not results:
            # nothing left to score (another kernel picked): the previous rows' picks are not this kernel's to measure
            self.last = None
            self.measure_button.disabled = True
            self.result.value = self._scored = (f"<i>{html.escape(self.stored_note)}; the edit is then scored on "
                                                f"their timings</i>" if self.stored_note else
                                                "<i>sweep first: the edit is scored on its stored timings</i>")
            return None
        spec, device, source, package = self.spec_getter(), self.device_getter(), self.code.value, self._package()
        try:
            def work():
                fn = load_heuristic(source, package=package)
                return rescore(fn, results, device, spec.canonical, spec=spec)

            limit = {} if self.time_limit is None else {"limit_s": self.time_limit}
            self.last = with_time_limit(work, **limit)
        except HeuristicError as e:
            self.last = None
            self.measure_button.disabled = True
            self.result.value = self._scored = error_html(f"heuristic: {e}")
            return None
        s = self.last.summary()
        ratio = lambda v: "-" if v != v else ("inf (a pick fails)" if v == math.inf else f"{v:.3f}x")  # noqa: E731
        us = lambda v: "never measured" if math.isnan(v) else ("failed" if math.isinf(v) else fmt_time(v))  # noqa: E731
        rows = "".join(
            f"<tr><td>{html.escape(' '.join(f'{k}={v}' for k, v in r.shape.items()))} {r.dtype}</td>"
            f"<td><code>{html.escape(str(r.old))}</code> {us(r.old_ms)}</td>"
            f"<td><code>{html.escape(str(r.new))}</code> {us(r.new_ms)}</td><td>{us(r.best_ms)}</td>"
            f"<td><b>{r.verdict}</b>{_band(r)}</td></tr>" for r in self.last.rows)
        self.result.value = (
            f"<p>edited rule vs current: <b>{s['wins']}</b> wins, <b>{s['loses']}</b> losses, "
            f"<b>{s['fails']}</b> picks that fail, {s['ties']} ties, {s['same']} unchanged, {s['unmeasured']} never "
            f"measured. Regret (geomean vs best, over the {s['compared']} shapes both rules have timings for): "
            f"current {ratio(s['old_regret'])}, edited {ratio(s['new_regret'])}.<br><small>A pick wins or loses "
            f"only beyond its shape's tie band, the one the shape's winner was chosen with (the selection's floor, "
            f"wider where its re-timed rounds were noisy). <i>best</i> is each shape's winner, the config an export "
            f"ships, so a pick that ties with it can score just under 1.00x; <code>heuristic_fit</code>'s regret "
            f"divides by each shape's fastest search median instead.</small></p>"
            f"<div style='max-height:360px;overflow:auto'><table><tr><th>shape</th><th>current</th><th>edited</th>"
            f"<th>best</th><th></th></tr>{rows}</table></div>")
        self._scored = self.result.value
        self.measure_button.disabled = not (self.last.unmeasured and self.measure)
        return self.last

    def _measure_missing(self):
        """Hands the never-measured picks to the workbench, which times them in its isolated workers off the cell
        and calls ``score`` again when they are stored."""
        if self.last and self.measure:
            self.measure_button.disabled = True
            th = self.measure(self.last.unmeasured)
            if th is None:  # refused, and told why: pressing it again says so again
                self.measure_button.disabled = False
            return th
        return None

    def save(self) -> None:
        try:
            source, package = self.code.value, self._package()
            with_time_limit(lambda: load_heuristic(source, package=package))  # never save code that does not load
            if not self.save_path.value.strip():
                raise HeuristicError("choose a file to save to")
            path = Path(self.save_path.value.strip()).expanduser()
            if path.is_dir():
                raise HeuristicError(f"{path} is a folder: name a file in it, e.g. {path / 'heuristic.py'}")
            if not path.resolve().parent.is_dir():
                raise HeuristicError(f"no folder {path.resolve().parent}: create it first, or choose another file")
            if path.resolve() == self._kernel_file().resolve() and not self.into_kernel.value:
                raise HeuristicError("that is the kernel's own heuristic.py: tick 'into the kernel's folder' to "
                                     "write it")
            if path.exists():
                path.with_suffix(path.suffix + ".bak").write_text(path.read_text())
            path.write_text(self.code.value)
            if self._shown is not None:
                self._saved[self._shown[0]] = self.code.value
            said = f"<p>saved to <code>{html.escape(str(path))}</code></p>"
        except OSError as e:  # the disk's word (read-only, full), with the path it refused
            said = error_html(f"not saved: cannot write {e.filename or self.save_path.value}: {e.strerror or e}")
        except (HeuristicError, ValueError) as e:
            said = error_html(f"not saved: {e}")
        # one line for the last save, under the re-score it followed: a refusal left above a later "saved to" would
        # leave it unclear whether the file was written
        self.result.value = self._scored + said


def _band(row) -> str:
    """The tie band beside a timed verdict: within it the two picks tie, as the shape's selection would call it."""
    if row.verdict not in ("wins", "loses", "ties") or not math.isfinite(row.old_ms):  # a failing default: no band
        return ""
    return f" <small title='the tie band this shape was decided with'>(band {row.band:.1%})</small>"
