"""The workbench's census tab: compile one shape's space for a GPU (named, or the one here) without timing anything,
and read what each config's binary uses beside what the sweep measured for it.

The census runs off the cell in its own processes (flytune_nb.engine.census_pool), writes its rows into the
workbench's results store as they come (Stop keeps them; Run again compiles only what is missing), and hands the rows
to the explorer, which then colours points by occupancy / spills / load width and shows each binary's resources on
hover. The table here filters by what an engineer looks for first: spills, narrow loads, LDS over the limit, configs
that did not compile, configs that build another's binary.
"""
from __future__ import annotations

import html
import math

import ipywidgets as W
import pandas as pd

from flytune_nb.analysis.resources import FILTERS, devices, rows_for, table
from flytune_nb.analysis.units import fmt_time
from flytune_nb.errors import first_line
from flytune_nb.ui.notebook.controls import error_html, run_in_thread
from flytune_nb.ui.notebook.styles import SCROLL, table_css

CSS = table_css("flytune-census", "white-space:nowrap;",
                ".flytune-census tr.spill td{background:#fde2e2}.flytune-census tr.narrow td{background:#fff4d6}"
                ".flytune-census tr.dup td{color:#888}")
MAX_ROWS = 400  # rendered; the store has them all (census_frame)


def target_options(here) -> list:
    """(label, value) per target: the GPU here first when there is one (value None), then the named ones."""
    from flytune_nb.core.targets import TARGETS

    opts = [(f"this GPU ({here.name})", None)] if here is not None and here.is_gpu else []
    return opts + [(f"{t.alias} ({t.device_name}, {t.arch})", t.alias) for t in TARGETS.values()]


class CensusView(W.VBox):
    """``store_getter(create=False)`` -> the workbench's Store (None: no store yet, unless ``create``),
    ``kernel_getter()`` -> the kernel's name, ``shapes_getter()`` -> [(shape, dtype)] of the grid,
    ``trials_getter(shape, dtype)`` -> that shape's trials frame (or None), ``busy()`` -> why a census must wait (a
    sweep is timing), or "". ``on_rows(rows)``: the rows changed."""

    def __init__(self, store_getter, kernel_getter, shapes_getter, *, paths=(), trials_getter=None,
                 busy=lambda: "", here=None) -> None:
        self._store, self._kernel, self._shapes = store_getter, kernel_getter, shapes_getter
        self._trials, self._busy, self.paths = trials_getter, busy, list(paths)
        self.target = W.Dropdown(description="target", options=target_options(here),
                                 layout=W.Layout(width="380px"))
        self.shape = W.Dropdown(description="shape", options=[], layout=W.Layout(width="320px"))
        self.sample = W.BoundedIntText(value=0, min=0, max=100000, description="configs",
                                       tooltip="0: the whole space; N: about N configs spread over it",
                                       layout=W.Layout(width="160px"))
        self.run_button = W.Button(description="compile census", icon="cogs", button_style="info",
                                   tooltip="compile every config for the target (nothing is timed, no GPU needed)")
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.bar = W.IntProgress(value=0, min=0, max=1, description="idle", layout=W.Layout(width="40%"))
        self.message = W.HTML()
        self.summary = W.HTML()
        self.show = W.Dropdown(description="show", options=list(FILTERS), layout=W.Layout(width="330px"))
        self.sort = W.Dropdown(description="sort by", options=["occupancy", "registers", "scratch", "measured p50",
                                                               "config"], layout=W.Layout(width="220px"))
        self.html = W.HTML()
        self.rows: list = []  # every census row of the kernel in the store
        self.on_rows = None
        self.census = None
        self._thread = None
        super().__init__([
            W.HTML("<small>compile the space for a GPU, here or not, and read what each binary uses: registers, "
                   "occupancy, LDS, spills, load widths (nothing is timed; the explorer colours its points by "
                   "these once a census exists)</small>"),
            W.HBox([self.target, self.shape, self.sample]), W.HBox([self.run_button, self.stop_button, self.bar]),
            self.message, self.summary, W.HBox([self.show, self.sort]), self.html])
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        for w in (self.target, self.shape, self.show, self.sort):
            w.observe(lambda _: self.render(), "value")

    # -- data ------------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the grid's shapes and the store's rows (a new kernel, a finished census or sweep)."""
        from flytune_nb.analysis.explore import shape_label

        try:
            shapes = list(self._shapes())
        except Exception:  # noqa: BLE001 - a grid being edited: keep the shapes shown
            shapes = None
        if shapes is not None:
            opts = [(shape_label(s, d), (tuple(s.items()), d)) for s, d in shapes]
            if list(self.shape.options) != opts:
                keep = self.shape.value if self.shape.value in [v for _, v in opts] else (opts[0][1] if opts else None)
                self.shape.options = opts
                self.shape.value = keep
        self.load(force=False)

    def load(self, force: bool = True) -> None:
        """The kernel's rows from the store; unless ``force``, only when the census table changed (a refresh after
        every finished shape would otherwise re-read thousands of rows that no one wrote)."""
        store, kernel = self._store(), self._kernel()
        stamp = (kernel, store.count("census")) if store is not None else (kernel, 0)
        if not force and stamp == getattr(self, "_stamp", None):
            return
        self._stamp = stamp
        self.rows = store.census_rows(kernel) if store is not None and kernel else []
        if self.on_rows is not None:
            self.on_rows(self.rows)
        self.render()

    def device_name(self) -> str | None:
        """The device name the chosen target's rows are stored under."""
        from flytune_nb.core.targets import get_target

        if self.target.value is None:
            from flytune_nb.core.device import current_device

            return current_device().name
        return get_target(self.target.value).device_name

    def shown_rows(self) -> list:
        if self.shape.value is None:
            return []
        shape, dtype = dict(self.shape.value[0]), self.shape.value[1]
        return rows_for(self.rows, shape, dtype, self.device_name())

    # -- actions ---------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self):
        """Take the census of the chosen shape for the chosen target in a thread (returned; None when refused)."""
        from flytune_nb.engine.census_pool import Census

        if self.running:
            return None
        self.message.value = ""
        why = self._busy()
        if why:
            self.message.value = error_html(f"not compiled: {why}")
            return None
        if self.shape.value is None:
            self.message.value = error_html("no shape: enter a grid above")
            return None
        shape, dtype = dict(self.shape.value[0]), self.shape.value[1]
        try:
            store = self._store(create=True)
            self.census = Census(self._kernel(), [shape], [dtype], target=self.target.value, db=store,
                                 paths=self.paths, sample=self.sample.value or None, progress=self._progress)
        except Exception as e:  # noqa: BLE001 - an unknown kernel / shape / no GPU: one inline line
            self.message.value = error_html(first_line(e))
            return None
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.bar.value, self.bar.max, self.bar.description = 0, 1, "starting"
        self.message.value = (f"<i>starting the compilers for {html.escape(self.census.device.label)} (a few "
                              f"seconds: each imports torch and Triton)…</i>")
        self._thread = run_in_thread(self.census.run, self._finished)
        return self._thread

    def _progress(self, shape, dtype, done, total) -> None:
        self.bar.max, self.bar.value = max(total, 1), done
        self.bar.description = f"{done}/{total}"
        self.message.value = f"<i>compiling for {html.escape(self.census.device.label)}: {done} of {total}</i>"

    def stop(self) -> None:
        if self.census is not None and self.running:
            self.census.stop()
            self.bar.description = "stopping"

    def _finished(self, results, error) -> None:
        self.run_button.disabled, self.stop_button.disabled = False, True
        self.bar.description = "stopped" if self.census is not None and self.census.stopped else "done"
        if error is not None:
            self.bar.description = "failed"
            self.message.value = error_html(f"census failed: {first_line(error)}")
        else:
            from flytune_nb.measure.census import format_summary

            self.message.value = ""
            self.summary.value = "".join(f"<pre style='font-size:12px;margin:4px 0'>{html.escape(format_summary(s))}"
                                         f"</pre>" for s in results or [])
            if self.census is not None and self.census.stopped:
                self.message.value = "<i>stopped: what compiled is stored; compile census again to finish</i>"
        try:
            self.load()
        except Exception as e:  # noqa: BLE001 - a store gone bad must not leave the buttons stuck
            self.message.value = error_html(f"cannot read the census rows: {first_line(e)}")

    # -- drawing ---------------------------------------------------------------------------------------------------
    def render(self) -> None:
        rows = self.shown_rows()
        if not rows:
            have = devices([r for r in self.rows])
            other = f" (the store has rows for {', '.join(have)})" if have else ""
            self.html.value = f"<i>no census of this shape for this target yet{html.escape(other)}</i>"
            return
        trials = None
        if self._trials is not None and self.shape.value is not None:
            trials = self._trials(dict(self.shape.value[0]), self.shape.value[1])
        df = table(rows, trials, show=self.show.value, sort=self.sort.value)
        counts = (f"{len(rows)} configs: {sum(r.ok for r in rows)} compiled, {sum(r.spills for r in rows)} spill, "
                  f"{sum(r.narrow for r in rows)} narrow loads, {sum(r.smem_over_limit for r in rows)} over the "
                  f"memory limit")
        if df.empty:
            self.html.value = f"<small>{counts}</small><br><i>none shown</i>"
            return
        here = trials is not None and not trials.empty
        head = ["config", "status", "registers", "occupancy", "limiter", "shared KiB", "scratch B", "widest load B",
                "MMA", "same binary as"] + (["measured p50"] if here else []) + ["error"]
        body = []
        for _, r in df.head(MAX_ROWS).iterrows():
            cls = ("failed" if r["status"] != "ok" else "spill" if r["spills"] else "narrow" if r["narrow"]
                   else "dup" if r["same binary as"] else "")
            cells = [r["config"] + (" (default)" if r["default"] else ""), r["status"], _int(r["registers"]),
                     _int(r["occupancy"]), r["limiter"] or "", "" if pd.isna(r["shared KiB"]) else r["shared KiB"],
                     _int(r["scratch B"]), _int(r["widest load B"]), r["mma"], r["same binary as"]]
            if here:
                p50 = r["measured p50"]
                cells.append(fmt_time(p50) if isinstance(p50, float) and math.isfinite(p50) else r["measured"] or "")
            cells.append(r["error"])
            body.append(f"<tr class='{cls}' title='{html.escape(r['resources'], quote=True)}'>"
                        + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
        more = f", showing {MAX_ROWS} of {len(df)}" if len(df) > MAX_ROWS else f", {len(df)} shown"
        self.html.value = (CSS + f"<small>{counts}{more} (hover a row for its resources; red: spills, amber: no "
                           f"16-byte loads, grey: another config's binary)</small><div style='{SCROLL}'>"
                           f"<table class='flytune-census'><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head)
                           + "</tr>" + "".join(body) + "</table></div>")

    def clear(self) -> None:
        """Another kernel: a census still compiling the previous one is stopped, nothing of it stays shown."""
        self.stop()
        self.rows, self.summary.value, self.message.value = [], "", ""
        self._stamp = None
        self.bar.value, self.bar.description = 0, "idle"
        self.render()


def _int(v) -> str:
    if v is None or pd.isna(v):
        return ""
    return str(int(v))
