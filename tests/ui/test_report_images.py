"""The static report's PNG copies never hold a headless run up: without a browser kaleido is not started, and a
kaleido that stops answering costs its time limit, not the run."""
import threading
import time

import pytest

from flytune_nb.ui.notebook import report

go = pytest.importorskip("plotly.graph_objects")
pytest.importorskip("kaleido")


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    monkeypatch.setattr(report, "_STUCK", [])


def test_without_a_browser_kaleido_is_not_started_and_the_reason_is_one_line(monkeypatch):
    import kaleido

    started = []
    monkeypatch.setattr(report, "chromium_path", lambda: None)
    monkeypatch.setattr(kaleido, "start_sync_server", lambda **kw: started.append(kw))
    images, why = report.png_images([go.Figure(), go.Figure()])
    assert images == [None, None] and not started
    assert why == report.NO_BROWSER and "apt-get install chromium" in why


def test_a_kaleido_that_never_answers_costs_its_time_limit_and_keeps_what_it_drew(monkeypatch):
    """kaleido 1.5 with a browser that fails to start blocks its caller forever (the server thread dies, the queue
    join never returns): here the second figure blocks the same way."""
    import kaleido
    import plotly.io as pio

    release = threading.Event()
    calls = []

    def to_image(fig, **kw):
        calls.append(fig)
        if len(calls) > 1:
            release.wait()
        return b"\x89PNG first"

    monkeypatch.setattr(report, "chromium_path", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(kaleido, "start_sync_server", lambda **kw: None)
    monkeypatch.setattr(kaleido, "stop_sync_server", lambda **kw: None)
    monkeypatch.setattr(pio, "to_image", to_image)
    t0 = time.monotonic()
    try:
        images, why = report.png_images([go.Figure(), go.Figure(), go.Figure()], first_s=0.5, each_s=0.5)
        elapsed = time.monotonic() - t0
    finally:
        release.set()
        for t in threading.enumerate():  # let the drawing thread end before monkeypatch restores kaleido
            if t.name.startswith("flytune-png"):
                t.join(5)
    assert elapsed < 5
    assert images == [b"\x89PNG first", None, None]
    assert why == "no PNG copies past the first 1 (kaleido gave none for 0.5 s)"
    # a later report in the same process does not wait for it again
    t0 = time.monotonic()
    again, why = report.png_images([go.Figure()], first_s=30, each_s=30)
    assert again == [None] and "stopped answering" in why and time.monotonic() - t0 < 1


def test_a_figure_kaleido_refuses_is_none_and_the_rest_are_drawn(monkeypatch):
    import kaleido
    import plotly.io as pio

    def to_image(fig, **kw):
        if fig.layout.title.text == "bad":
            raise RuntimeError("the browser closed\nmore lines")
        return b"\x89PNG ok"

    monkeypatch.setattr(report, "chromium_path", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(kaleido, "start_sync_server", lambda **kw: None)
    monkeypatch.setattr(kaleido, "stop_sync_server", lambda **kw: None)
    monkeypatch.setattr(pio, "to_image", to_image)
    images, why = report.png_images([go.Figure(), go.Figure(layout={"title": {"text": "bad"}}), go.Figure()])
    assert images == [b"\x89PNG ok", None, b"\x89PNG ok"]
    assert why == "no PNG copies (kaleido: RuntimeError: the browser closed)"
