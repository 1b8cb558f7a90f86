"""Static figures of a finished sweep for papermill and headless runs: plotly JSON (interactive in JupyterLab, no
widget state) with a PNG beside it, so nbconvert's HTML and code-hosting viewers, which do not run plotly.js,
show the figures too.

PNGs come from kaleido, which drives a headless Chromium: one browser for the whole report (its start-up, ~4 s on
the 2-core CPU box, is paid once; each image after it took ~0.4 s). Without kaleido or a browser the report says so
in one line and keeps the interactive figures.
"""
from __future__ import annotations

import base64
import json
import sys
import threading
import warnings

from flytune_nb.core.shapes import shape_text

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def static_figures(results, spec=None) -> list:
    """Overview of all shapes, each shape's configs by latency rank (coloured by its first varying knob), and the
    speed-up heat map."""
    from flytune_nb.analysis.explore import RANK, knobs, trials_frame
    from flytune_nb.analysis.overview import overview_frame
    from flytune_nb.ui.notebook.figures import explorer_figure, overview_figure, speedup_heatmap

    figs = []
    if not results:
        return figs
    batch = spec.batch_axis if spec is not None else next(iter(results[0].shape))
    if len(results) > 1:
        figs.append(overview_figure(overview_frame(results, batch), batch))
    for r in results:
        df = trials_frame([r])
        ks = knobs(df)
        title = f"{r.kernel} {shape_text(r.shape)} {r.dtype}"
        figs.append(explorer_figure(df, RANK, ks[0] if ks else None, baselines=r.baselines, title=title,
                                    height=380))
    heat = speedup_heatmap(results)
    if heat is not None:
        figs.append(heat)
    return figs


# kaleido's first image starts Chromium (~4 s on the 2-core CPU box), each later one took ~0.4 s: a report that has
# had no new image for this long is not going to get one
PNG_FIRST_S, PNG_EACH_S = 60.0, 15.0
NO_BROWSER = ("no PNG copies (kaleido draws through Chrome or Chromium and finds neither: apt-get install chromium, "
              "or run kaleido_get_chrome)")
_STUCK: list = []  # why kaleido stopped answering in this process: later reports do not wait for it again


def chromium_path() -> str | None:
    """The Chrome / Chromium kaleido would start (its own download, $BROWSER_PATH, or one on the PATH), None when
    there is none, "" when that cannot be told (choreographer's finder moved: kaleido is then left to try)."""
    try:
        from choreographer.browsers.chromium import Chromium

        return Chromium.find_browser(skip_local=False)
    except Exception:  # noqa: BLE001 - an API we do not own: no answer, not a failure
        return ""


def png_images(figs, width: int = 900, first_s: float = PNG_FIRST_S, each_s: float = PNG_EACH_S) -> tuple[list, str]:
    """PNG bytes per figure (None where none could be made) and, when some are missing, why in one line. Never
    hangs: kaleido 1.5 waits forever for a browser that failed to start (its server thread dies, the caller's queue
    join never returns). So without a browser it is not started, and the images are drawn in a thread that must
    give its first image within ``first_s`` and each later one within ``each_s``; one that stops answering is left
    behind, and later reports in this process skip the images at once."""
    try:
        import kaleido
        import plotly.io as pio
    except ImportError as e:
        return [None] * len(figs), f"no PNG copies ({e.name} is not installed: pip install kaleido)"
    if _STUCK:
        return [None] * len(figs), _STUCK[0]
    if chromium_path() is None:
        return [None] * len(figs), NO_BROWSER
    images: list = []
    why: list = []
    finished = threading.Event()

    def draw() -> None:
        started = False
        try:
            kaleido.start_sync_server(silence_warnings=True)
            started = True
            for fig in figs:
                try:
                    images.append(pio.to_image(fig, format="png", width=width, height=fig.layout.height or 450))
                except Exception as e:  # noqa: BLE001 - a browser that died: say so once
                    images.append(None)
                    why.append(f"no PNG copies (kaleido: {type(e).__name__}: {str(e).splitlines()[0][:160]})")
        except Exception as e:  # noqa: BLE001
            why.append(f"no PNG copies (kaleido could not start: {type(e).__name__}: {e})")
        finally:
            if started:
                _stop_server(kaleido)
            finished.set()

    with warnings.catch_warnings():  # in this thread: filters are per process, and the drawing may be left behind
        warnings.simplefilter("ignore")  # kaleido's notes about its server's options
        threading.Thread(target=draw, name="flytune-png", daemon=True).start()
        seen, limit = 0, first_s
        while not finished.wait(limit) and len(images) > seen:
            seen, limit = len(images), each_s
    if finished.is_set() or len(images) == len(figs):  # all drawn (stopping the server may still be under way)
        return list(images) + [None] * (len(figs) - len(images)), why[0] if why else ""
    done = list(images)
    _STUCK.append("no PNG copies (kaleido stopped answering in this process: restart it to try again)")
    # a server whose thread died is reset by stopping it, so other kaleido calls do not wait on it as well; one that
    # is stuck would block the stop too, hence a thread of its own
    threading.Thread(target=_stop_server, args=(kaleido,), name="flytune-png-stop", daemon=True).start()
    return done + [None] * (len(figs) - len(done)), \
        f"no PNG copies past the first {len(done)} (kaleido gave none for {limit:.3g} s)"


def _stop_server(kaleido) -> None:
    try:
        kaleido.stop_sync_server(silence_warnings=True)
    except Exception:  # noqa: BLE001 - stopping is best effort
        pass


def bundle(fig, png: bytes | None) -> dict:
    import plotly.io as pio

    data = {PLOTLY_MIME: json.loads(pio.to_json(fig, validate=False)), "text/plain": f"<figure: {_title(fig)}>"}
    if png is not None:
        data["image/png"] = base64.b64encode(png).decode()
    return data


def _title(fig) -> str:
    text = fig.layout.title.text or "plot"
    return text.split("<br>")[0][:100]


def static_report(results, spec=None, image: bool = True) -> None:
    from IPython.display import display

    figs = static_figures(results, spec)
    images, why = png_images(figs) if image else ([None] * len(figs), "")
    for fig, png in zip(figs, images):
        display(bundle(fig, png), raw=True)
    if why:
        print(f"flytune: {why}; the interactive figures are there", file=sys.stderr)
