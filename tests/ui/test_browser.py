"""The real thing: JupyterLab on 127.0.0.1, Debian's Chromium driven by Playwright, the workbench notebook run,
Run pressed, progress and plot points checked, Stop pressed, a screenshot saved. Skips (with the reason) when
Chromium or Playwright is missing; .ci/run installs Debian's chromium first."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from flytune_nb.core.resources import NOTEBOOKS

CHROMIUM = "/usr/bin/chromium"
NOTEBOOK = NOTEBOOKS / "workbench.ipynb"

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)", allow_module_level=True)
playwright_sync = pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extras)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:  # a grid that keeps the interpreter busy for a while, in this test's own folder
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = ('kernel = "rmsnorm"\ngrid = {"M": "1,2,4,8,16,32", "N": "1024"}\ndtypes = ["bf16"]\n'
                              'db = "workbench.db"\nexport_dir = "exports"')
    (root / "workbench.ipynb").write_text(json.dumps(nb))
    config = tmp_path / "config"
    (config / "labconfig").mkdir(parents=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None", "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(url + "/api/status", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("JupyterLab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
                time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started, by the PID we hold
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_workbench_in_a_real_browser(lab, tmp_path):
    shot = Path(os.environ.get("FLYTUNE_SCREENSHOT", tmp_path / "workbench.png"))
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1400, "height": 1500})
        page.goto(f"{lab}/lab/tree/workbench.ipynb")
        page.wait_for_selector(".jp-Notebook", timeout=60_000)
        page.wait_for_selector("text=Python 3 (ipykernel) | Idle", timeout=90_000)  # the kernel is up
        # Run all cells: the Run menu, then its "Run All Cells" entry (menu items, not text elsewhere on the page).
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        run = page.locator(".widget-button:has-text('Run')").first
        try:
            run.wait_for(timeout=90_000)
        except Exception:
            page.screenshot(path=str(tmp_path / "failed.png"))
            print("screenshot of the failure:", tmp_path / "failed.png")
            raise
        page.locator(".widget-html-content:has-text('shapes x')").first.wait_for(timeout=30_000)
        run.click()
        progress = page.locator(".widget-html-content:has-text(' of ')").first
        progress.wait_for(timeout=120_000)  # first trial done: "M=1 N=1024 bf16: 1 of 24 ..."
        page.wait_for_function(
            "() => document.querySelectorAll('.scatterlayer .trace .points path').length >= 3", timeout=120_000)
        bar = page.locator(".widget-hprogress .progress-bar").first
        width = lambda: float(bar.get_attribute("style").split("width:")[1].split("%")[0])  # noqa: E731
        first = width()
        page.wait_for_function(  # the bar advances while we watch
            f"() => parseFloat(document.querySelector('.widget-hprogress .progress-bar').style.width) > {first}",
            timeout=120_000)
        text = progress.inner_text()
        assert " of " in text and "best so far" in text
        page.locator(".jp-OutputArea-output").last.scroll_into_view_if_needed()
        page.locator(".widget-button:has-text('Run')").first.scroll_into_view_if_needed()
        page.screenshot(path=str(shot), full_page=False)
        page.locator(".widget-button:has-text('Stop')").first.click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.widget-html-content')].some(e => /stopped:/.test(e.innerText))",
            timeout=120_000)
        points = page.evaluate("document.querySelectorAll('.scatterlayer .trace .points path').length")
        browser.close()
    assert first > 0 and points >= 3
    assert shot.exists() and shot.stat().st_size > 10_000
