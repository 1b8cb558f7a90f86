"""The census processes: resumable runs into the store, a config that hangs or kills its compiler is its own row,
and a sweep's census-driven pruning on the CPU path (compiled for a named GPU)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.targets import TARGETS
from flytune_nb.engine.census_pool import Census, CensusPool, spread, take_census
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.errors import RunError, UsageError


def test_spread_strides_are_coprime_to_the_knob_periods():
    space = list(range(2044))
    picked = spread(space, sample=60)
    stride = picked[1] - picked[0]
    assert all(stride % p for p in (2, 3, 5, 7)) and 55 <= len(picked) <= 62
    assert {x % 4 for x in picked} == {0, 1, 2, 3}  # every (nonkdim, waves_per_eu) pair of a 2x2-period space
    assert spread(space, every=5) == space[::5] and spread([1, 2], sample=10) == [1, 2]


def test_a_census_is_stored_beside_the_trials_and_a_rerun_compiles_nothing(tmp_path):
    db = tmp_path / "c.db"
    first, = Census("rmsnorm", "M=4 N=2048", ["bf16"], target="h200", db=db, jobs=1).run()
    assert first.compiled == first.configs > 0 and first.stored == 0 and first.default is not None
    # looped BLOCK_N with num_stages 1 and 2: the same binary, found as such
    assert first.duplicates > 0 and all(
        {c.num_stages for c in g} == {1, 2} and len({c.num_warps for c in g}) == 1 for g in first.duplicate_groups)
    again, = Census("rmsnorm", "M=4 N=2048", ["bf16"], target="h200", db=db, jobs=1).run()
    assert again.stored == again.configs == first.configs
    assert [(r.config, r.binary, r.registers) for r in again.rows] == [(r.config, r.binary, r.registers)
                                                                      for r in first.rows]
    store = Store(db, readonly=True)
    assert store.count("census") == first.configs and set(store.frame(table="census")["key"]) == {first.key}
    store.close()


@pytest.fixture
def flaky_plugin(tmp_path):
    """A kernel whose `run` compiles nothing for MODE=0, kills its process for MODE=1 and hangs for MODE=2."""
    folder = tmp_path / "plugins" / "flaky"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent('''
        import os, time
        import torch
        from flytune_nb.core.config import Config
        from flytune_nb.core.spec import KernelSpec

        def run(inputs, config):
            if config["MODE"] == 1:
                os._exit(3)
            if config["MODE"] == 2:
                time.sleep(600)
            return inputs["x"]

        SPEC = KernelSpec(
            name="flaky", axes=("N",), batch_axis="N", dtypes=("fp32",),
            make_inputs=lambda s, d, dev: {"x": torch.empty(s["N"], device=dev.torch_device)},
            run=run, reference=lambda i: i["x"],
            configs=lambda s, d, dev: [Config({"MODE": m}) for m in (0, 1, 2, 0)],
            default=lambda s, d, dev: Config({"MODE": 0}), shape_of=lambda i: {"N": i["x"].shape[0]})
    '''))
    for part in ("kernel.py", "configs.py", "heuristic.py", "reference.py"):
        (folder / part).write_text("")
    return folder.parent


def test_a_config_that_kills_or_hangs_its_compiler_is_its_own_row(flaky_plugin):
    # The hang costs the whole timeout: 3 s, where MODE=1's crash is back in ~15 ms and MODE=0's compile (a call on
    # meta tensors, by the process that loaded the plugin for the plan) in less; a replacement process's start is
    # not counted in the timeout.
    pool = CensusPool(TARGETS["mi300x"].device(), jobs=1, paths=[flaky_plugin], timeout=3)
    try:
        s = take_census(pool, "flaky", {"N": 8}, "fp32")
    finally:
        pool.close()
    status = {r.config["MODE"]: r for r in s.rows}
    assert status[0].status == "ok" and status[0].binary is None  # compiled nothing: no binary to compare
    assert status[1].status == "crashed" and "exit 3" in status[1].error
    assert status[2].status == "timeout" and "3 s" in status[2].error
    assert s.configs == 3 and s.compiled == 1


def _mode_kernel(root, name: str, compile_: str):
    """A kernel folder ``name`` under ``root/plugins`` of configs MODE = 0 (the default), 1, 2, whose ``run`` first runs
    the statement ``compile_`` (``config``, ``inputs``, ``pathlib``, ``time`` in scope): a long compile to interrupt."""
    folder = root / "plugins" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent(f'''
        import pathlib, time
        import torch
        from flytune_nb.core.config import Config
        from flytune_nb.core.spec import KernelSpec

        def run(inputs, config):
            {compile_}
            return inputs["x"].clone()

        SPEC = KernelSpec(
            name={name!r}, axes=("N",), batch_axis="N", dtypes=("fp32",),
            make_inputs=lambda s, d, dev: {{"x": torch.ones(s["N"], device=dev.torch_device)}},
            run=run, reference=lambda i: i["x"].clone(),
            configs=lambda s, d, dev: [Config({{"MODE": m}}) for m in (0, 1, 2)],
            default=lambda s, d, dev: Config({{"MODE": 0}}), shape_of=lambda i: {{"N": i["x"].shape[0]}})
    '''))
    for part in ("kernel.py", "configs.py", "heuristic.py", "reference.py"):
        (folder / part).write_text("")
    return folder.parent


def _ctrl_c(args: list, markers: list) -> tuple[str, float]:
    """``flytune ARGS`` in a process group of its own with SIGINT at its default, as a shell's foreground job has it;
    once every marker file exists, Ctrl-C to the whole group as a terminal sends it. (output, seconds from the
    interrupt to the exit), the exit asserted to be the interrupt's."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.Popen([sys.executable, "-m", "flytune_nb", *args], env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not all(m.exists() for m in markers) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not all(m.exists() for m in markers):
        p.kill()
        pytest.fail(p.communicate()[0])
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 130 and "interrupted" in out, out
    return out, time.monotonic() - t0


def _census_rows(db):
    store = Store(db, readonly=True)
    rows = store.frame(table="census")
    store.close()
    return rows


def test_ctrl_c_stops_a_census_without_marking_the_config_in_flight_as_crashed(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: the census process compiling a config must not die of it
    (its config would be stored as crashing the compiler). MODE=1 stands for a long compile: it says it started, then
    takes 3 s; the interrupt lands inside it."""
    started = tmp_path / "compiling"
    plugins = _mode_kernel(tmp_path, "slow", f'if config["MODE"] == 1: pathlib.Path({str(started)!r}).touch(); '
                                             f'time.sleep(3)')
    db = tmp_path / "c.db"
    _ctrl_c(["census", "slow", "--target", "mi300x", "--grid", "N=8", "--dtype", "fp32", "--path", str(plugins),
             "--db", str(db), "-j", "1", "--quiet"], [started])
    rows = _census_rows(db)
    assert "crashed" not in set(rows["status"]), rows[["config", "status", "error"]]
    assert len(rows) <= 2  # MODE=0 and perhaps MODE=1, finished: MODE=2 never started


def test_ctrl_c_during_long_compiles_waits_one_grace_period_not_one_per_process(tmp_path):
    """The census processes ignore Ctrl-C and get a grace period to finish their compile before they are killed: two
    processes stuck in 60 s compiles are given it together (about 10 s), not one after the other (20 s, and 160 s for
    the 16 processes a census starts by default)."""
    plugins = _mode_kernel(tmp_path, "stuck", f'if config["MODE"]: pathlib.Path({str(tmp_path)!r}, '
                                              f'f"compiling{{config[\'MODE\']}}").touch(); time.sleep(60)')
    _, seconds = _ctrl_c(["census", "stuck", "--target", "mi300x", "--grid", "N=8", "--dtype", "fp32", "--path",
                          str(plugins), "--db", str(tmp_path / "c.db"), "-j", "2", "--quiet"],
                         [tmp_path / "compiling1", tmp_path / "compiling2"])
    assert seconds < 16


def test_ctrl_c_of_a_census_pruned_sweep_is_not_held_by_a_hung_census_compile(tmp_path):
    """The census processes ignore Ctrl-C; a sweep interrupted while its census thread waits on a hung compile must
    end that compile, not wait out its thread (60 s) and the pool's grace period, and store no crash for it."""
    # the census compiles on meta tensors: only its compile of MODE=1 hangs
    plugins = _mode_kernel(tmp_path, "stuck", f'if inputs["x"].is_meta and config["MODE"] == 1: '
                                              f'pathlib.Path({str(tmp_path)!r}, "compiling").touch(); time.sleep(600)')
    db = tmp_path / "s.db"
    _, seconds = _ctrl_c(["sweep", "stuck", "--grid", "N=8", "--dtype", "fp32", "--prune-census", "mi300x", "--path",
                          str(plugins), "--db", str(db), "--no-isolate"], [tmp_path / "compiling"])
    assert seconds < 15
    rows = _census_rows(db)
    assert rows.empty or "crashed" not in set(rows["status"]), rows[["config", "status", "error"]]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from Linux's /proc")
def test_a_census_process_in_a_hung_compile_ends_when_its_parent_is_killed(tmp_path):
    """kill -9 of the census (or a second Ctrl-C while it waits for its processes) must not leave a compiler process
    behind: one stuck in a compile never reads its stdin's end."""
    started = tmp_path / "compiling"
    plugins = _mode_kernel(tmp_path, "stuck", f'if config["MODE"] == 1: pathlib.Path({str(started)!r}).touch(); '
                                              f'time.sleep(600)')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.Popen([sys.executable, "-m", "flytune_nb", "census", "stuck", "--target", "mi300x", "--grid", "N=8",
                          "--dtype", "fp32", "--path", str(plugins), "--db", str(tmp_path / "c.db"), "-j", "1",
                          "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not started.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists()
    children = [int(c) for t in Path(f"/proc/{p.pid}/task").iterdir() for c in (t / "children").read_text().split()]
    assert children
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while any(map(_running, children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [c for c in children if _running(c)]
    for c in left:
        os.kill(c, signal.SIGKILL)
    assert not left


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is no zombie (an orphan's zombie waits for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_bad_target_or_kernel_is_one_line_before_anything_starts(tmp_path):
    with pytest.raises(UsageError, match="unknown target"):
        Census("rmsnorm", "M=4 N=256", target="mi301x")
    with pytest.raises(UsageError, match="unknown kernel"):
        Census("rmsnorm2", "M=4 N=256", target="mi300x")
    with pytest.raises(UsageError, match="grid must be text like"):
        Census("rmsnorm", 5, target="mi300x")
    with pytest.raises(UsageError, match="no GPU here"):
        Census("rmsnorm", "M=4 N=256")  # no target, and this machine has no GPU
    with pytest.raises(UsageError, match="prune option"):
        Sweep("rmsnorm", "M=4 N=256", ["fp32"], isolate=False, prune="fastest")


def test_a_flydsl_census_reads_its_code_objects_with_no_rocm_path(tmp_path, monkeypatch, flydsl_compiler):
    """A FlyDSL kernel builds no Triton kernel: its census compiles through FlyDSL, reads what compile_report reads
    and links with a folder of its own (ROCM_PATH unset). waves_per_eu=2 builds BLOCK_THREADS=256's object again:
    counted once. A target FlyDSL does not compile for is one line."""
    def cfg(bt, wpe=None, vec=8):
        return Config({"BLOCK_THREADS": bt, "VEC": vec}, num_warps=None, num_stages=None, waves_per_eu=wpe)

    shape = {"M": 8, "N": 4096}
    (want,) = flydsl_compiler.compile_report(get_kernel("flydsl_rmsnorm"), shape, "bf16", cfg(256), "gfx942").kernels
    monkeypatch.delenv("ROCM_PATH")
    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "c.db"
    s, = Census("flydsl_rmsnorm", "M=8 N=4096", ["bf16"], target="mi300x", db=db, jobs=1,
                configs=[cfg(256), cfg(256, 2), cfg(128), cfg(256, vec=4)]).run()
    assert s.configs == s.compiled == 4, s.errors
    rows = {r.config: r for r in s.rows}
    assert s.default is rows[cfg(256)]
    assert (s.default.registers, s.default.shared_bytes) == (want.vgpr, want.lds)
    assert rows[cfg(256)].binary == rows[cfg(256, 2)].binary != rows[cfg(128)].binary
    assert s.distinct_binaries == 3 and s.duplicates == 1
    # the instructions of the assembly FlyDSL wrote: 4096 / (256 threads x 8) = 2 vectors of 16 bytes a thread, of
    # x and of the weight loaded, of the output stored; VEC=4 loads 8 bytes
    assert want.insn["loads"] == {"buffer_load_dwordx4": 4} and want.insn["stores"] == {"buffer_store_dwordx4": 2}
    assert rows[cfg(256)].widest_load == 16 and not rows[cfg(256)].narrow
    assert rows[cfg(256, vec=4)].widest_load == 8 and rows[cfg(256, vec=4)].narrow
    from flytune_nb.measure.census import format_summary

    summary = format_summary(s)
    assert "no 16-byte loads (narrow): 1: BLOCK_THREADS=256,VEC=4 [widest 8 B]" in summary, summary
    table = Store(db, readonly=True).frame(table="census").set_index("config").loc[cfg(256).to_json()]
    assert (table["vgprs"], table["sgprs"], table["binary"]) == (want.vgpr, want.sgpr, rows[cfg(256)].binary)
    assert (tmp_path / "cache" / "flydsl-rocm" / "llvm" / "bin" / "ld.lld").exists()
    with pytest.raises(UsageError, match="flydsl_rmsnorm is a FlyDSL kernel: it compiles for gfx942, gfx950 only, "
                                         "not for NVIDIA_H200"):
        Census("flydsl_rmsnorm", "M=8 N=4096", ["bf16"], target="h200", jobs=1).run()


def test_without_a_linker_a_flydsl_census_says_what_to_install_or_set(flydsl_installed, tmp_path, monkeypatch):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "not-rocm"))
    monkeypatch.setattr(flydsl_installed, "find_lld", lambda: None)
    with pytest.raises(RunError, match=r"apt-get install lld-22; or set ROCM_PATH to a ROCm installation"):
        flydsl_installed.use_linker(tmp_path / "linker")


def test_census_pruning_on_the_cpu_path_times_one_config_per_binary(tmp_path):
    """The interpreter builds no binaries, so a named target decides: rmsnorm's looped num_stages 1 and 2 build the
    same H200 binary, and only one of each pair is timed; the rows are in the store, keyed for the H200."""
    db = tmp_path / "s.db"
    # N=1024 has looped blocks too, at 35 configs against N=2048's 41 and half the interpreted work per config (the
    # unpruned sweep: ~1.6 s against ~3.7 s on 2 cores); its H200 census is the one the prefetch test below takes.
    full = Sweep("rmsnorm", "M=4 N=1024", ["fp32"], db=tmp_path / "full.db", isolate=False, baselines=()).run()[0]
    sw = Sweep("rmsnorm", "M=4 N=1024", ["fp32"], db=db, isolate=False, baselines=(), prune="census:h200")
    pruned = sw.run()[0]
    (dropped,) = sw.prune.dropped.values()
    timed = {t.config for t in pruned.trials}
    assert dropped and timed == {t.config for t in full.trials} - set(dropped)
    assert all(why.startswith("same binary as") for why in dropped.values())
    for c, why in dropped.items():  # its twin (the other num_stages) was timed
        twin = Config.parse(why.removeprefix("same binary as "))
        assert twin in timed and twin.replace(num_stages=c.num_stages) == c
    assert pruned.best is not None and pruned.default in timed
    census = Store(db, readonly=True).frame(table="census")
    assert set(census["device"]) == {"NVIDIA_H200"} and len(census) >= len(timed)


def test_census_pruning_without_a_gpu_or_a_target_is_refused_before_anything_is_measured(tmp_path):
    db = tmp_path / "s.db"
    with pytest.raises(UsageError, match="needs a target"):
        Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(), prune="census").run()
    store = Store(db)
    assert store.count("trials") == 0 and store.count("census") == 0
    store.close()


def test_a_stopped_census_keeps_what_compiled_and_the_next_run_compiles_only_the_rest(tmp_path):
    """Stop from the progress callback (as the workbench's Stop does from another thread): no further config
    starts, the row taken is stored, and running again compiles only what is missing."""
    db = tmp_path / "c.db"
    seen = []

    def progress(shape, dtype, done, total):
        seen.append((done, total))
        census.stop()

    census = Census("rmsnorm", "M=4 N=2048", ["bf16"], target="h200", db=db, jobs=1, progress=progress)
    first, = census.run()
    assert census.stopped and seen == [(1, seen[0][1])] and seen[0][1] > 1
    assert first.configs == 1 and first.default is not None  # the default is compiled first
    rest, = Census("rmsnorm", "M=4 N=2048", ["bf16"], target="h200", db=db, jobs=1).run()
    assert rest.stored == 1 and rest.configs == seen[0][1] and rest.compiled == rest.configs


def test_census_pruning_compiles_the_next_shapes_ahead_while_one_is_timed(tmp_path, monkeypatch):
    """prefetch() takes every shape's census in the background, in sweep order, before the sweep asks for any of
    them; asking then costs no compile (each shape's census ran once) and prunes as before. A sweep over three shapes
    leaves no census thread behind."""
    import threading

    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine import census_pool
    from flytune_nb.engine.census_pool import CensusPruner

    taken = []
    real = census_pool.take_census
    monkeypatch.setattr(census_pool, "take_census", lambda *a, **k: taken.append(a[2]) or real(*a, **k))
    spec = get_kernel("rmsnorm")
    dev = TARGETS["h200"].device()
    shapes = [({"M": 4, "N": n}, "fp32") for n in (1024, 2048)]
    plans = [(s, d, list(dict.fromkeys(spec.configs(s, d, dev)))) for s, d in shapes]
    pruner = CensusPruner("h200", jobs=1)
    device = {"backend": "interpreter", "name": "CPU_interpreter"}
    pruner.prefetch("rmsnorm", plans, device)
    for slot in pruner._ahead.values():
        assert slot["done"].wait(300)  # done without anyone asking
    assert taken == [{"M": 4, "N": 1024}, {"M": 4, "N": 2048}]
    for shape, dtype, space in plans:
        kept = pruner("rmsnorm", shape, dtype, space, spec.default(shape, dtype, dev), device)
        dropped = pruner.dropped[("rmsnorm", '{"M": 4, "N": %d}' % shape["N"], dtype)]
        assert set(kept) == set(space) - set(dropped) and len(kept) < len(space)
    assert len(taken) == 2  # no second census
    pruner.close()

    # budget=2: every shape is still pruned by its census; timing all that is left of the three spaces interpreted
    # (~70 configs) costs ~3 s on 2 cores and says nothing more here.
    sw = Sweep("rmsnorm", "M=4 N=256,1024,2048", ["fp32"], db=tmp_path / "s.db", isolate=False, baselines=(),
               prune="census:h200", budget=2)
    results = sw.run()
    assert len(results) == 3 and len(sw.prune.summaries) == 3
    assert all(r.best is not None for r in results)
    assert not any(t.name == "flytune-census-ahead" for t in threading.enumerate())


def test_a_stopped_pruner_lets_a_waiting_shape_go_on_unpruned_at_once():
    """Stop (the sweep's, an interrupt) reaches the pruner: a shape whose census has not been taken is timed with
    its whole space at once, not after its census compiles."""
    import time

    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.census_pool import CensusPruner

    spec = get_kernel("rmsnorm")
    dev = TARGETS["h200"].device()
    plans = [({"M": 4, "N": n}, "fp32", list(dict.fromkeys(spec.configs({"M": 4, "N": n}, "fp32", dev))))
             for n in (1024, 2048)]
    pruner = CensusPruner("h200", jobs=1)
    device = {"backend": "interpreter", "name": "CPU_interpreter"}
    pruner.prefetch("rmsnorm", plans, device)
    pruner.stop()
    t0 = time.monotonic()
    shape, dtype, space = plans[1]
    assert pruner("rmsnorm", shape, dtype, space, spec.default(shape, dtype, dev), device) == space
    assert time.monotonic() - t0 < 5
    pruner.close()


class _FakePool:
    """take_census's view of a CensusPool, without processes: an AMD target whose configs compile to records made
    from their knobs (``fail``: configs whose compile fails); ``compiled`` lists what was asked for."""

    def __init__(self, space, default, fail=()):
        self.paths, self.space, self.default, self.fail, self.compiled = (), space, default, set(fail), []

    def plan(self, kernel, shape, dtype):
        return {"default": self.default.to_dict(), "space": [c.to_dict() for c in self.space], "key": "k",
                "device": {"name": "AMD_Instinct_MI300X", "arch": "gfx942", "backend": "hip"},
                "occupancy_unit": "waves/SIMD", "toolchain": {}, "source": "s"}

    def compile(self, kernel, shape, dtype, configs, done, stop=None):
        for c in configs:
            if stop is not None and stop.is_set():
                return
            cfg = Config.from_dict(c)
            self.compiled.append(cfg)
            if cfg in self.fail:
                done(c, {"status": "error", "error": "boom", "compile_s": 0.1})
            else:
                regs = 32 * cfg.num_warps + cfg["BLOCK_SIZE_M"]
                done(c, {"status": "ok", "compile_s": 0.1, "binary": str(cfg), "kernels": [
                    {"vgprs": regs, "agprs": 0, "sgprs": 20, "occupancy": 4, "insn": {}}]})


def test_siblings_bookkeeping_across_runs_failures_and_every_config(tmp_path):
    """A group is compiled once and its siblings are inferred; a re-run reuses them and compiles nothing; a failed
    representative's siblings are compiled each; siblings=False (--every-config) compiles stored siblings too; the
    summary's counts add up every time."""
    from flytune_nb.measure.census import format_summary

    space = [Config({"BLOCK_SIZE_M": bm, "GROUP_SIZE_M": g}, num_warps=w) for bm in (16, 32) for w in (4, 8)
             for g in (1, 8, 16)]
    default = space[0]
    bad = Config({"BLOCK_SIZE_M": 32, "GROUP_SIZE_M": 1}, num_warps=8)  # the representative of its group
    store = Store(tmp_path / "c.db")
    pool = _FakePool(space, default, fail=[bad])
    s = take_census(pool, "matmul", {"M": 1}, "bf16", store=store)
    # 4 groups: 3 representatives compile (default's included), the failed one's 2 siblings compile themselves
    assert len(pool.compiled) == 4 + 2 and s.siblings == s.inferred == 3 * 2 and s.stored == 0
    assert {c for c in pool.compiled} == {default, *[c for c in space if c["GROUP_SIZE_M"] == 1], *[
        c for c in space if (c["BLOCK_SIZE_M"], c.num_warps) == (32, 8) and c["GROUP_SIZE_M"] != 1]}
    rows = {r.config: r for r in s.rows}
    assert not rows[bad].ok and all(rows[c].sibling_of is None for c in space if c["BLOCK_SIZE_M"] == 32 and c.num_warps == 8)
    assert "(0 from the store, 6 compile runs in" in format_summary(s)
    pool.compiled.clear()
    again = take_census(pool, "matmul", {"M": 1}, "bf16", store=store)
    # the failed config is compiled again (a failure is never reused), nothing else
    assert pool.compiled == [bad] and again.stored == len(space) - 1 and again.inferred == 0
    assert "1 compile runs in" in format_summary(again)
    pool.compiled.clear()
    every = take_census(pool, "matmul", {"M": 1}, "bf16", store=store, siblings=False)
    assert sorted(map(str, pool.compiled)) == sorted(str(c) for c, r in rows.items() if r.sibling_of or not r.ok)
    assert every.siblings == 0 and every.inferred == 0 and all(r.binary for r in every.rows if r.ok)
    assert f"{len(pool.compiled)} compile runs in" in format_summary(every)
    store.close()


_POOL_CENSUS = textwrap.dedent("""
    import dataclasses, json, sys
    from flytune_nb.core.device import enter_compile_mode
    from flytune_nb.core.targets import TARGETS
    dev = TARGETS["mi300x"].device()
    enter_compile_mode(dev)
    from flytune_nb.engine.tasks import compile_one
    shape, configs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    out = [compile_one("matmul", (), shape, "bf16", c, device=dataclasses.asdict(dev), target=("hip", "gfx942", 64),
                       census=True) for c in configs]
    print(json.dumps(out))
""")


def test_the_precompile_pools_compiles_are_the_census_a_pruning_sweep_judges_by(tmp_path, monkeypatch):
    """On the GPU being swept the precompile pool's compiles give each config's census record (no census process,
    no second compile): for gfx942 its resources are the census process's, a spilling config is judged not worth
    timing, one that does not spill and the default are timed, and the rows go to the store's census table."""
    import dataclasses
    import json
    import os
    import subprocess
    import sys

    from flytune_nb.core.registry import get_kernel
    from flytune_nb.engine.census_pool import CensusPruner, census_cache_dir
    from tests.conftest import CENSUS_CACHE, REPO

    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", os.environ.get("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE)))
    dev = TARGETS["mi300x"].device()
    spec, shape = get_kernel("matmul"), {"M": 256, "N": 512, "K": 4096}
    default = spec.default(shape, "bf16", dev)
    # 32x64x256 with 32-wide MFMA on 4 warps at two waves per EU: 60 VGPRs spill (244 B of scratch a thread)
    spill = Config.from_dict({**default.to_dict(), "BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 256,
                              "matrix_instr_nonkdim": 32, "num_warps": 4, "waves_per_eu": 2})
    plain = Config.from_dict({**default.to_dict(), "BLOCK_SIZE_K": 32})
    configs = [default, spill, plain]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(census_cache_dir(dev))  # the census process's: its compiles are then cache hits
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])  # this checkout's flytune_nb
    run = subprocess.run([sys.executable, "-c", _POOL_CENSUS, json.dumps(shape),
                          json.dumps([c.to_dict() for c in configs])], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    answers = json.loads(run.stdout.strip().splitlines()[-1])
    assert [a[0] for a in answers] == ["ok"] * 3 and all(a[3] is not None for a in answers)

    pool = CensusPool(dev, jobs=1, cache_dir=census_cache_dir(dev))
    try:
        census = take_census(pool, "matmul", shape, "bf16", configs=configs, siblings=False)
    finally:
        pool.close()
    by_config = {r.config: r for r in census.rows}
    store = Store(tmp_path / "s.db")
    pruner = CensusPruner()
    pruner.check(dataclasses.asdict(dev), precompiling=True)
    assert pruner.from_pool and pruner._pool is None  # no census process started
    plan = {"key": census.key, "key_fields": {"toolchain": {}, "source": ""}}
    verdicts = {c: pruner.judge("matmul", shape, "bf16", c, default, a[3], dataclasses.asdict(dev), store, plan)
                for c, a in zip(configs, answers)}
    assert verdicts[default] is None and verdicts[plain] is None
    assert verdicts[spill].startswith("spills to scratch") and by_config[spill].spills
    stored = store.census_for(census.key)
    for c in configs:
        mine, theirs = stored[c], by_config[c]
        assert (mine.binary, mine.registers, mine.scratch_bytes, mine.shared_bytes, mine.occupancy, mine.mma) == \
            (theirs.binary, theirs.registers, theirs.scratch_bytes, theirs.shared_bytes, theirs.occupancy,
             theirs.mma), c
    assert pruner.dropped == {("matmul", json.dumps(shape), "bf16"): {spill: verdicts[spill]}}
    store.close()
