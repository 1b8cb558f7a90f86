"""How long does a newcomer wait from Run All to the workbench's Run button, and from Run to the first point?

On the CPU path (or a GPU where there is one).

A Jupyter kernel is started the way JupyterLab starts one, with a clean environment (PATH, HOME, a scratch folder:
no TRITON_INTERPRET, as a user's shell has it), and fed the packaged workbench notebook's cells. Measured in the
kernel, per repetition (a fresh kernel each):
- run_all_to_button_s: from sending the first cell to the workbench's display message (the controls, Run included,
  are on the page then; the front-end paints them within a frame);
- run_to_first_point_s: from pressing Run (``wb.run()``) to the explorer's figure holding the first measured point,
  pressed ``--think`` seconds after the button appeared (a user reads the preview first; 0 = at once);
- run_to_first_trial_s: from Run to the first trial event (the point minus drawing).
``--browser`` adds the same two spans in JupyterLab + Chromium (Playwright), end to end.

    python -m benchmarks workbench_startup --reps 3
    python -m benchmarks workbench_startup --browser

Writes benchmarks/results/<device>/workbench_startup.{json,md} (or under --out DIR).
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PARAMS = ('kernel = "rmsnorm"\ngrid = {"M": "1,16,64", "N": "1024"}\ndtypes = ["fp32"]\ndb = "startup.db"\n'
          'export_dir = "exports"\npaths = []\nstrategy = "exhaustive"\nbudget = None\ntimeout = 120\n')
POINT = """
import time as _t
_t0 = _t.perf_counter()
_trial = float("nan")
_th = wb.run()
while True:
    if _trial != _trial and wb.control.done >= 1:
        _trial = _t.perf_counter() - _t0
    _f = wb.explorer.slot.figure
    if _f is not None and any(len(getattr(tr, "x", None) or ()) for tr in _f.data):
        break
    _t.sleep(0.005)
print("FIRST_POINT", _t.perf_counter() - _t0, _trial)
wb.stop(); _th.join(60)
"""


def clean_env(folder: Path) -> dict:
    home = folder / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "PYTHONPATH": str(HERE.parent), "LANG": os.environ.get("LANG", "C.UTF-8")}


def notebook_cells() -> list[str]:
    from flytune_nb.core.resources import NOTEBOOKS

    nb = json.loads((NOTEBOOKS / "workbench.ipynb").read_text())
    cells = []
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        cells.append(PARAMS if "parameters" in c.get("metadata", {}).get("tags", []) else src)
    return cells


def kernel_run(think_s: float) -> dict:
    from jupyter_client.manager import start_new_kernel

    folder = Path(tempfile.mkdtemp(prefix="wb-startup-"))
    km, kc = start_new_kernel(kernel_name="python3", env=clean_env(folder), cwd=str(folder))
    try:
        kc.execute("pass", reply=True, timeout=120)  # the kernel is idle: what "Run All" starts from
        while True:  # drain
            try:
                kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                break
        t0 = time.perf_counter()
        for code in notebook_cells():
            kc.execute(code)
        button = None
        while button is None:
            msg = kc.get_iopub_msg(timeout=300)
            data = msg["content"].get("data", {}) if msg["msg_type"] in ("display_data", "execute_result") else {}
            if "application/vnd.jupyter.widget-view+json" in data:
                button = time.perf_counter() - t0
            if msg["msg_type"] == "error":
                raise RuntimeError("\n".join(msg["content"]["traceback"])[-2000:])
        time.sleep(think_s)
        out: list[str] = []
        reply = kc.execute_interactive(POINT, timeout=600, output_hook=lambda m: _collect(m, out))
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the Run cell failed: {reply['content']}")
        line = next(l for l in "".join(out).splitlines() if l.startswith("FIRST_POINT"))
        point, trial = map(float, line.split()[1:])
        return {"run_all_to_button_s": button, "run_to_first_point_s": point, "run_to_first_trial_s": trial,
                "think_s": think_s}
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _collect(msg, sink) -> None:
    if msg["msg_type"] == "stream":
        sink.append(msg["content"]["text"])


def browser_run(think_s: float) -> dict:
    """The same spans end to end in JupyterLab + Chromium (tests/ui/test_browser.py's way of starting them)."""
    sys.path.insert(0, str(HERE.parent))
    import tests.ui.test_browser as tb

    class Factory:
        @staticmethod
        def mktemp(name):
            return Path(tempfile.mkdtemp(prefix=name))

    gen = tb.lab.__wrapped__(Factory())
    lab = next(gen)
    try:
        tb._notebook(lab["root"], "startup.ipynb", PARAMS)
        page = lab["browser"].new_page(viewport={"width": 1400, "height": 1600})
        page.goto(f"{lab['url']}/lab/workspaces/startup/tree/startup.ipynb?reset&token={tb.TOKEN}")
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=180_000)
        t0 = time.perf_counter()
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.locator(".widget-button:visible:has-text('Run')").first.wait_for(timeout=300_000)
        button = time.perf_counter() - t0
        time.sleep(think_s)
        t1 = time.perf_counter()
        page.locator(".widget-button:visible:has-text('Run')").first.click()
        page.wait_for_function("() => document.querySelectorAll('.widget-tab .scatterlayer .trace .points path')"
                               ".length >= 1", timeout=300_000)
        point = time.perf_counter() - t1
        page.locator(".widget-button:visible:has-text('Stop')").first.click()
        return {"run_all_to_button_s": button, "run_to_first_point_s": point, "think_s": think_s}
    finally:
        try:
            next(gen)
        except StopIteration:
            pass


def summary(rows: list[dict], key: str) -> str:
    xs = [r[key] for r in rows if key in r and r[key] == r[key]]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


def main(argv=None) -> int:
    from benchmarks.common import parser, write

    ap = parser(__doc__, __file__)
    ap.add_argument("--reps", type=int, default=3, help="fresh kernels per think time (default 3)")
    ap.add_argument("--think", type=float, action="append", default=None,
                    help="seconds between the Run button appearing and pressing it (repeatable; default 0 and 3)")
    ap.add_argument("--browser", action="store_true", help="also measure end to end in JupyterLab + Chromium")
    args = ap.parse_args(argv)
    thinks = args.think or [0.0, 3.0]

    from flytune_nb.core.device import current_device

    device = current_device()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    kernel_rows = [dict(kernel_run(t), think_s=t) for t in thinks for _ in range(args.reps)]
    browser_rows = [browser_run(t) for t in thinks] if args.browser else []
    payload = {"device": device.name, "cpus": os.cpu_count(), "load_at_start": load, "kernel": kernel_rows,
               "browser": browser_rows, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "grid": PARAMS}
    lines = [f"# Workbench start-up on {device.name} ({os.cpu_count()} CPUs, load {load:.1f} at start)", "",
             "| span | think | kernel (median, min, max) | " + ("JupyterLab + Chromium |" if browser_rows else ""),
             "|---|---|---|" + ("---|" if browser_rows else "")]
    for t in thinks:
        k = [r for r in kernel_rows if r["think_s"] == t]
        b = [r for r in browser_rows if r["think_s"] == t]
        for key, name in (("run_all_to_button_s", "Run All -> Run button"), ("run_to_first_point_s",
                                                                            "Run -> first point"),
                          ("run_to_first_trial_s", "Run -> first trial event")):
            lines.append(f"| {name} | {t:g} s | {summary(k, key)} |" + (f" {summary(b, key)} |" if b else ""))
    lines += ["", "Targets: Run All -> Run button <= 4 s, Run -> first point <= 1 s on the CPU path. 'think': "
              "seconds between the button appearing and Run being pressed (the worker's process server starts "
              "in the background meanwhile)."]
    write("workbench_startup", payload, "\n".join(lines), out=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
