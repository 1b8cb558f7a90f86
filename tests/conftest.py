import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from flytune_nb.core.device import DESCRIBED, current_device, ensure_backend

ensure_backend()  # TRITON_INTERPRET=1 on machines without a GPU, before any kernel module is imported

HERE = os.path.dirname(__file__)
REPO = os.path.dirname(os.path.abspath(HERE))  # the checkout: docs/, benchmarks/, examples/
PLUGINS = os.path.join(HERE, "plugins")
FIXTURES = Path(HERE) / "fixtures"  # H200 measurements the CPU tests replay
# Triton's caches for the census targets (gfx942, gfx950, sm_90 binaries), kept across runs (.gitignored): a census
# of what is already there costs ~20 ms a config instead of ~0.2-2 s.
CENSUS_CACHE = Path(REPO) / ".flytune_cache" / "census"


def triton_is_pinned() -> bool:
    """Whether the installed Triton is the one scripts/bootstrap.sh pins (TRITON_PIN), whose compiler output tests may
    read as facts (register allocation, spills). A torch CUDA wheel brings its own Triton (torch 2.13.0: 3.7.1, whose
    AMD backend spills tiles that 3.6.0 fits); moving the pin makes those facts run again, and fail where they moved."""
    import importlib.metadata
    import re

    pin = re.search(r"TRITON_PIN:-triton==([\w.]+)", Path(REPO, "scripts", "bootstrap.sh").read_text())
    return pin is not None and importlib.metadata.version("triton") == pin.group(1)


# A described H200 (what current_device() reports there), for CPU tests of GPU-only decisions; nothing runs on it.
H200 = DESCRIBED["NVIDIA_H200"]
# torch.cuda.get_device_properties as an H200 and an MI300X report them (the HIP branch is tested with these).
H200_PROPS = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, L2_cache_size=62914560,
                             total_memory=150_000_000_000, shared_memory_per_block=49152,
                             shared_memory_per_block_optin=232448)
MI300X_PROPS = SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4,
                               multi_processor_count=304, L2_cache_size=4194304, total_memory=205_000_000_000,
                               shared_memory_per_block=65536)


def as_unprivileged_user(fn):
    """``fn()``'s JSON-able result, run in a forked child as a user the file permissions apply to: root ignores
    them, so a root child drops to ``nobody`` (uid 65534) first. Forked, not started: ``nobody`` may not reach this
    venv's Python, and flytune_nb is already imported. An exception comes back as its repr."""
    import json

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe and never return into pytest
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            result = {"value": fn()}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test with it
            result = {"error": repr(e)}
        try:
            os.write(w, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert "error" not in result, result["error"]
    return result["value"]


@pytest.fixture
def shared_folder():
    """A fresh folder under /tmp that every user can read (pytest's tmp_path is its owner's only): fill it, then
    ``os.chmod(folder, 0o555)`` to make it read-only for as_unprivileged_user. Removed afterwards."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="flytune-ro-")
    os.chmod(folder, 0o755)
    yield folder
    os.chmod(folder, 0o755)
    shutil.rmtree(folder)


def pytest_collection_modifyitems(config, items):
    if current_device().is_gpu:
        return
    skip = pytest.mark.skip(reason="needs a GPU (run on the device: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own tuning cache and working directory (results stores land there), and never searches
    unless it asks to."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLYTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLYTUNE_AUTOTUNE", raising=False)
    monkeypatch.delenv("FLYTUNE_KERNEL_PATH", raising=False)
    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE))


@pytest.fixture
def fresh_lookup_cache():
    """The lookup's table cache emptied before and after: tests that write export files into tmp folders must never
    read another test's parsed tables. Modules that need it: ``pytestmark = pytest.mark.usefixtures(...)``."""
    from flytune_nb.serve.lookup import LOOKUP

    LOOKUP.clear()
    yield LOOKUP
    LOOKUP.clear()


@pytest.fixture
def dev():
    return current_device()


@pytest.fixture
def cpu_timer():
    """One timed call after evaluate's correctness run: the tests that take it check results, not speed, and every
    interpreted call of a GEMM tile form costs ~0.3 s on these 2-core machines."""
    from flytune_nb.measure.timer import CpuTimer

    return CpuTimer(reps=1, warmup=0)


@pytest.fixture
def timer(dev):
    from flytune_nb.measure.timer import make_timer

    return make_timer(dev, reps=2, rep_ms=20, warmup_ms=5)


# -- FlyDSL (the optional backend) -----------------------------------------------------------------------------------
# `make test` installs flytune_nb[flydsl]; .ci/run also installs Debian's lld-22 and sets FLYTUNE_REQUIRE_FLYDSL=1,
# so that there a missing FlyDSL or linker fails the FlyDSL tests instead of skipping them.
def _flydsl_missing(what: str):
    if os.environ.get("FLYTUNE_REQUIRE_FLYDSL", "0") not in ("", "0"):
        pytest.fail(f"FLYTUNE_REQUIRE_FLYDSL=1 but {what}")
    pytest.skip(what)


@pytest.fixture(scope="session")
def flydsl_installed():
    from flytune_nb.backends import flydsl

    if not flydsl.available():
        _flydsl_missing("flydsl is not installed (pip install 'flytune_nb[flydsl]')")
    return flydsl


@pytest.fixture(scope="session")
def flydsl_compiler(flydsl_installed, request):
    """FlyDSL able to compile gfx942 / gfx950 code objects on this machine: ROCM_PATH at a folder holding
    llvm/bin/ld.lld (a link to lld >= 22; no root needed), and FlyDSL's disk cache under pytest's cache folder
    (reused across runs, never ~/.flydsl). Workers inherit both."""
    from flytune_nb.errors import RunError

    saved = {k: os.environ.get(k) for k in ("ROCM_PATH", "FLYDSL_RUNTIME_CACHE_DIR")}
    try:
        root = flydsl_installed.linker_root(request.config.cache.mkdir("flydsl-rocm"))
    except RunError as e:
        _flydsl_missing(str(e))
    os.environ["ROCM_PATH"] = str(root)
    os.environ["FLYDSL_RUNTIME_CACHE_DIR"] = str(request.config.cache.mkdir("flydsl-cache"))
    yield flydsl_installed
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class DeleteAfterFirstTrial:
    """A sweep listener that deletes the store file ``db`` once the first trial is done (the store still open), and
    keeps the TrialDone events it saw in ``done``."""

    def __init__(self, db) -> None:
        self.db, self.done = Path(db), []

    def __call__(self, event) -> None:
        from flytune_nb.core.events import TrialDone

        if isinstance(event, TrialDone):
            self.done.append(event)
            if len(self.done) == 1:
                self.db.unlink()


def count_rows(db, table: str = "trials") -> int:
    """How many rows ``table`` of the results store at ``db`` holds."""
    import sqlite3

    with sqlite3.connect(db) as c:
        return c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


@pytest.fixture(scope="session")
def _swept_once(tmp_path_factory):
    """The store behind ``swept``, swept once a session: the sweep costs ~2 s on 2 cores and ~30 tests take it.
    Swept as a test would be (its own cwd and tuning cache), since no test's _isolated_cache is in place yet."""
    from flytune_nb.engine.sweep import Sweep

    folder = tmp_path_factory.mktemp("swept")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("FLYTUNE_CACHE_DIR", str(folder / "cache"))
        mp.delenv("FLYTUNE_AUTOTUNE", raising=False)
        mp.delenv("FLYTUNE_KERNEL_PATH", raising=False)
        Sweep("rmsnorm", "M=1,4,16 N=256", ["fp32"], db=folder / "s.db", isolate=False, baselines=()).run()
    return folder / "s.db"


@pytest.fixture
def swept(tmp_path, _swept_once):
    """A results store of rmsnorm M=1,4,16 N=256 fp32, swept in this process (no baselines): this test's own copy
    (tmp_path / "s.db"), which it may change or delete."""
    import sqlite3

    from flytune_nb.engine.store import Store

    db = tmp_path / "s.db"
    with sqlite3.connect(_swept_once) as source, sqlite3.connect(db) as copy:
        source.backup(copy)  # the WAL's rows too, whether or not the sweep checkpointed them
    source.close()
    copy.close()
    return Store(db)


def wall_clock(kernel_call, quantiles=None, **_):
    """The interpreter's stand-in for Triton's autotune benchmarker (which asks the GPU driver): one call, wall
    time, as ``do_bench`` returns it (one number, or one per quantile asked)."""
    import time

    t = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - t) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


@pytest.fixture
def noisy_shape():
    """(SearchResult, device, C, {b: config}) of the toy kernel at N=64 fp32, for the heuristic editor's verdicts.
    Default D and candidate C re-timed over five rounds, C's paired ratios 0.6-1.2 around 0.90: the selection's
    band is 3 x the median's standard error, 16%, so C's 10% lead is a tie and D is kept. X, Y, Z and W (the
    configs of BLOCK 88, 80, 110 and 120) were only timed in the search (the default's search and re-timed medians
    agree, so no rescaling): 0.88, 0.80, 1.10 and 1.20 of D's time."""
    from flytune_nb.core.config import Config
    from flytune_nb.core.device import DeviceInfo
    from flytune_nb.measure.trial import Trial
    from flytune_nb.strategies.loop import SearchResult
    from flytune_nb.strategies.selection import Rule, decide

    dev = DeviceInfo(backend="interpreter", name="CPU_interpreter", arch="cpu", sm_count=1, l2_bytes=0,
                     total_memory=0)
    d, c = Config({"BLOCK": 128, "MODE": 0}, num_warps=1), Config({"BLOCK": 256, "MODE": 0}, num_warps=1)
    others = {b: Config({"BLOCK": b, "MODE": 0}, num_warps=2) for b in (88, 80, 110, 120)}
    ratios = [0.6, 0.836, 0.9, 0.964, 1.2]
    sel = decide(d, [c], {d: [1.0] * 5, c: ratios}, Rule())
    trials = [Trial("toy", {"N": 64}, "fp32", d, "ok", p20=1.0, p50=1.0, p80=1.0),
              Trial("toy", {"N": 64}, "fp32", c, "ok", p20=0.7, p50=0.7, p80=0.7)]
    trials += [Trial("toy", {"N": 64}, "fp32", cfg, "ok", p20=b / 100, p50=b / 100, p80=b / 100)
               for b, cfg in others.items()]
    return SearchResult("toy", {"N": 64}, "fp32", dev, d, trials, selection=sel), dev, c, others
