"""The real thing: JupyterLab started with a clean environment (as a user's shell has it: no TRITON_INTERPRET, no test
variables), Debian's Chromium driven by Playwright, the packaged workbench notebook run as a user runs it.

One JupyterLab server for the module. Covered: the first Run on the CPU path passes (the interpreter race fails
every trial here, and a JupyterLab that inherits the test session's TRITON_INTERPRET hides it); a double-click on
Run starts one sweep; every tab; the overview and the explorer (screenshots: FLYTUNE_SCREENSHOT_DIR=docs writes the
README's); export preview, diff and write; switching kernel; Stop during a hang. Skips (with the reason) when
Chromium or Playwright is missing; .ci/run installs Debian's chromium first."""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flytune_nb.core.resources import NOTEBOOKS
from tests.conftest import PLUGINS

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)", allow_module_level=True)
playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extras)")

TOKEN = "flytune-browser-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(root: Path, name: str, params: str) -> Path:
    nb = json.loads((NOTEBOOKS / "workbench.ipynb").read_text())
    for cell in nb["cells"]:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = params
    path = root / name
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    root, home = tmp / "root", tmp / "home"
    root.mkdir()
    home.mkdir()
    config = tmp / "config"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    port = _free_port()
    # What a user's shell has, and no more: the kernel's environment is this one, so TRITON_INTERPRET is not preset.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "JUPYTER_CONFIG_DIR": str(config),
           "JUPYTER_DATA_DIR": str(tmp / "data"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
           "LANG": os.environ.get("LANG", "C.UTF-8"), "FLYTUNE_EVIL_MODES": "0,3", "FLYTUNE_EVIL_SLEEPS": "0"}
    # (FLYTUNE_EVIL_*: the hanging plugin's space for the Stop test, read only by that test plugin.)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None", "--allow-root"],
        env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=open(tmp / "lab.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("JupyterLab did not start: " + (tmp / "lab.log").read_text()[-2000:])
                time.sleep(0.5)
        with playwright_sync.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            yield {"url": url, "root": root, "browser": browser, "tmp": tmp}
            browser.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started, by the PID we hold
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _open(lab, name: str):
    page = lab["browser"].new_page(viewport={"width": 1400, "height": 1700})
    # a workspace of its own, reset: the lab opens this notebook alone, not the previous test's beside it
    page.goto(f"{lab['url']}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook", timeout=90_000)
    page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    run = page.locator(".widget-button:visible:has-text('Run')").first
    run.wait_for(timeout=120_000)
    page.locator(".widget-html-content:has-text('trials after pruning')").first.wait_for(timeout=60_000)
    return page


def _label(page) -> str:
    return page.evaluate("[...document.querySelectorAll('.widget-html-content')].map(e => e.innerText)"
                         ".find(t => /^(finished|stopped|sweep failed|every trial failed)/.test(t)) || ''")


def _wait_label(page, pattern: str, timeout_ms: int) -> str:
    page.wait_for_function(
        "p => [...document.querySelectorAll('.widget-html-content')].some(e => new RegExp(p).test(e.innerText))",
        arg=pattern, timeout=timeout_ms)
    return _label(page)


def _tab(page, title: str) -> None:
    page.locator(".widget-tab .lm-TabBar-tab", has_text=title).first.click()
    page.wait_for_timeout(300)


def _visible_plots(page) -> list[str]:
    """The text of the plots shown (the selected tab's), top to bottom."""
    return page.evaluate("[...document.querySelectorAll('.widget-tab .js-plotly-plot')]"
                         ".filter(p => p.offsetParent !== null).map(p => p.innerText)")


# resolved at import: the tests change folders
SHOTS = Path(os.environ["FLYTUNE_SCREENSHOT_DIR"]).absolute() if os.environ.get("FLYTUNE_SCREENSHOT_DIR") else None


def _shot(page, lab, name: str, locator=None) -> Path:
    folder = SHOTS or lab["tmp"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    (locator or page).screenshot(path=str(path))
    return path


def test_first_run_on_the_cpu_path_double_run_tabs_views_export_and_kernel_switch(lab):
    """The first Run passes on a CPU machine (every trial ok), a double-click starts one sweep, each tab shows its
    content, the overview and explorer draw, export previews a diff and writes, and switching kernel clears the
    previous kernel's plot, finish line and export message."""
    _notebook(lab["root"], "first.ipynb",
              'kernel = "rmsnorm"\ngrid = {"M": "1,4,16", "N": "256"}\ndtypes = ["fp32"]\ndb = "first.db"\n'
              'export_dir = "scratch_exports"\npaths = []\nstrategy = "random"\nbudget = 3\ntimeout = 120\n')
    page = _open(lab, "first.ipynb")
    t0 = time.monotonic()
    page.locator(".widget-button:visible:has-text('Run')").first.dblclick()  # a double-click: one sweep, not two
    page.wait_for_function(
        "() => document.querySelectorAll('.widget-tab .scatterlayer .trace .points path').length >= 1",
        timeout=120_000)
    first_point_s = time.monotonic() - t0
    label = _wait_label(page, "^finished", 240_000)
    assert "0 of 9 failed" in label, label  # the interpreter race fails every one of them
    runs = sqlite3.connect(lab["root"] / "first.db").execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert runs == 1, f"{runs} sweeps started by one double-click"
    statuses = {r[0] for r in sqlite3.connect(lab["root"] / "first.db").execute("SELECT status FROM trials")}
    assert statuses == {"ok"}
    print(f"first point {first_point_s:.1f} s after Run")

    _tab(page, "explorer")
    assert "M=16 N=256 fp32" in _visible_plots(page)[0]  # it followed the running shape
    _shot(page, lab, "workbench_explorer.png", page.locator(".widget-tab").first)

    _tab(page, "overview")
    page.wait_for_function("() => [...document.querySelectorAll('.widget-tab .js-plotly-plot')]"
                           ".some(p => p.offsetParent !== null && p.innerText.includes('all shapes'))",
                           timeout=30_000)
    assert "heuristic regret" in page.locator(".widget-tab").first.inner_text()
    _shot(page, lab, "workbench_overview.png", page.locator(".widget-tab").first)

    _tab(page, "results")
    page.wait_for_selector(".flytune-table tr >> nth=5", timeout=30_000)
    _tab(page, "census")  # compile the shape's space for an MI300X from this CPU machine
    page.locator(".widget-button:visible:has-text('compile census')").first.click()
    page.wait_for_selector(".flytune-census tr >> nth=2", timeout=180_000)  # M=1: the header and 2 configs
    text = page.locator(".widget-tab").first.inner_text()
    assert "AMD_Instinct_MI300X (gfx942): 2 configs: 2 ok" in text and "limiter" in text, text[:2000]
    _shot(page, lab, "workbench_census.png", page.locator(".widget-tab").first)
    _tab(page, "heuristic vs best")
    page.locator(".widget-html-content:has-text('heuristic regret (geomean')").first.wait_for(timeout=30_000)
    _tab(page, "heuristic editor")
    assert "def default" in page.locator(".widget-tab textarea").first.input_value()
    page.locator(".widget-html-content:has-text('edited rule vs current')").first.wait_for(timeout=30_000)
    _tab(page, "compare runs")
    page.locator(".widget-button:visible:has-text('Load')").first.click()
    page.locator(".widget-html-content:has-text('device/toolchain group')").first.wait_for(timeout=30_000)

    _tab(page, "export")
    page.locator(".widget-button:visible:has-text('Preview')").first.click()
    page.locator(".widget-html-content:has-text('new file')").first.wait_for(timeout=30_000)
    assert "+{" in page.locator(".widget-tab pre:visible").first.inner_text()  # the diff against nothing committed there
    page.locator(".widget-button:visible:has-text('Write files')").first.click()
    page.locator(".widget-html-content:has-text('wrote:')").first.wait_for(timeout=30_000)
    assert list((lab["root"] / "scratch_exports" / "rmsnorm").rglob("*.json"))

    page.locator(".widget-dropdown select").first.select_option("softmax")  # switching kernel
    page.wait_for_function("() => ![...document.querySelectorAll('.widget-html-content')]"
                           ".some(e => /^finished/.test(e.innerText) || /wrote:/.test(e.innerText))", timeout=30_000)
    _tab(page, "explorer")
    page.wait_for_function("() => [...document.querySelectorAll('.widget-tab .js-plotly-plot')]"
                           ".some(p => p.innerText.includes('no results for this kernel yet'))", timeout=30_000)
    assert page.evaluate("document.querySelectorAll('.widget-tab .scatterlayer .trace .points path').length") == 0
    page.close()


def test_stop_during_a_hang_ends_the_sweep_within_seconds(lab):
    """Stop ends a hung trial within seconds (the 0.5 s grace, then the kill), not after the trial's timeout (300 s
    here), and the label says "stopped" rather than showing the previous config and "ETA 0 s"."""
    _notebook(lab["root"], "hang.ipynb",
              f'kernel = "evil"\ngrid = {{"N": "16"}}\ndtypes = ["fp32"]\ndb = "hang.db"\nexport_dir = "ex"\n'
              f'paths = [{PLUGINS!r}]\nstrategy = "exhaustive"\nbudget = None\ntimeout = 300\n')
    page = _open(lab, "hang.ipynb")
    page.locator(".widget-button:visible:has-text('Run')").first.click()
    page.locator(".widget-html-content:has-text('MODE=3')").first.wait_for(timeout=120_000)  # the hang runs
    assert "running" in page.locator(".widget-html-content:has-text('MODE=3')").first.inner_text()
    t0 = time.monotonic()
    page.locator(".widget-button:visible:has-text('Stop')").first.click()
    label = _wait_label(page, "^stopped", 30_000)
    took = time.monotonic() - t0
    assert took < 10, took  # 0.5 s grace, the kill, the page round trips; not the 300 s timeout
    assert "Run resumes" in label
    stored = [r[0] for r in sqlite3.connect(lab["root"] / "hang.db").execute("SELECT config FROM trials")]
    assert len(stored) == 1 and '"MODE":0' in stored[0]  # the hang is not stored
    page.close()
