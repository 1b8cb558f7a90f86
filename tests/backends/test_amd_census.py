"""CI's AMD gate: every built-in kernel's space compiled for gfx942 (MI300X) and gfx950 (MI355X) on its example
shape, without an AMD GPU. A config of our own AMD spaces that does not compile, or a heuristic default that spills
to scratch, fails here.

A spread sample of each space (stride coprime to the knob periods, so every waves_per_eu / nonkdim / warps value is
hit) and every heuristic default at the example shape and at the smallest and largest batch sizes: about 200
compiles a target, ~1 minute on 2 cores with a cold Triton cache, seconds once tests/conftest.CENSUS_CACHE has them.
What this cannot say: that a real MI300X loads these binaries, how fast they run, their real occupancy.
"""
import threading

import pytest

from flytune_nb.core.registry import get_kernel
from flytune_nb.core.targets import TARGETS
from flytune_nb.engine.census_pool import take_census

KERNELS = ("rmsnorm", "fused_add_rmsnorm", "softmax", "matmul", "fused_moe")
SAMPLE = {"rmsnorm": 24, "fused_add_rmsnorm": 24, "softmax": 24, "matmul": 36, "fused_moe": 14}
BATCH = (1, 4096)  # the defaults' other batch sizes: decode and prefill
TARGET_NAMES = ("mi300x", "mi355x")


@pytest.fixture(scope="module")
def amd_census(census_pools):
    """{(target, kernel): CensusSummary of the example shape} and {(target, kernel, M): default's row}: both
    targets at once, on the folder's shared census processes."""
    spaces, defaults, errors = {}, {}, []
    pools = {alias: census_pools[alias] for alias in TARGET_NAMES}  # started here, not in the threads

    def run(alias: str) -> None:
        dev, pool = TARGETS[alias].device(), pools[alias]
        try:
            for name in KERNELS:
                spec = get_kernel(name)
                example = spec.example()
                s = take_census(pool, name, example, "bf16", sample=SAMPLE[name])
                spaces[alias, name] = s
                defaults[alias, name, example[spec.batch_axis]] = s.default
                for m in BATCH:
                    shape = {**example, spec.batch_axis: m}
                    d = spec.default(shape, "bf16", dev)
                    defaults[alias, name, m] = take_census(pool, name, shape, "bf16", configs=[d], limit=1).default
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a,)) for a in TARGET_NAMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return spaces, defaults


@pytest.mark.parametrize("alias", TARGET_NAMES)
def test_every_sampled_config_of_our_amd_spaces_compiles(amd_census, alias):
    spaces, _ = amd_census
    for name in KERNELS:
        s = spaces[alias, name]
        bad = [f"{r.config}: {r.status} {r.error}" for r in s.rows if not r.ok]
        assert not bad, f"{name} on {alias}: {len(bad)} of {s.configs} did not compile: {bad[:3]}"
        assert s.configs >= min(SAMPLE[name], 10) and s.distinct_binaries > 1


@pytest.mark.parametrize("alias", TARGET_NAMES)
def test_no_heuristic_default_spills(amd_census, alias):
    _, defaults = amd_census
    for (target, name, m), row in defaults.items():
        if target != alias:
            continue
        assert row is not None and row.ok, (name, m, row and row.error)
        assert not row.spills, f"{name} M={m} default {row.config} spills {row.scratch_bytes} B on {alias}"
        assert not row.smem_over_limit, f"{name} M={m} default {row.config} needs {row.shared_bytes} B of LDS"


@pytest.mark.parametrize("alias", TARGET_NAMES)
def test_every_kernel_loads_16_bytes_a_lane_on_wave64(amd_census, alias):
    """Our HIP spaces offer no config whose loads are all narrower than 16 bytes: no BLOCK_N / warps pair of the row
    kernels, no GEMM tile whose operand tiles are too small for its warps (kit/spaces.py)."""
    spaces, _ = amd_census
    for name in ("rmsnorm", "fused_add_rmsnorm", "softmax", "matmul", "fused_moe"):
        narrow = [str(r.config) for r in spaces[alias, name].narrow]
        assert not narrow, f"{name} on {alias}: {narrow[:3]}"


RESOURCES = ("status", "registers", "spilled_registers", "scratch_bytes", "shared_bytes", "smem_over_limit",
             "occupancy", "occupancy_limiter", "mma", "widest_load", "narrow", "spills")


@pytest.mark.parametrize("name", ("matmul", "fused_moe"))
def test_tile_order_siblings_share_the_resources_they_would_compile_to(name, tmp_path, census_pools):
    """A census compiles one config per GROUP_SIZE_M group and gives the rest its resources: compiled one by one
    for gfx942, every sibling has the registers, LDS, occupancy, MFMA and load widths of the config it was given,
    and a stored sibling row says whose they are."""
    from flytune_nb.engine.census_pool import sibling_groups
    from flytune_nb.engine.store import Store

    spec, dev = get_kernel(name), TARGETS["mi300x"].device()
    shape = spec.example()
    space = spec.configs(shape, "bf16", dev)
    default = spec.default(shape, "bf16", dev)
    group = sibling_groups(space, spec.schedule_knobs)
    reps = [c for c in space if group[c] == c and c != group.get(default)]
    members = {r: [c for c in space if group[c] == r] for r in reps}
    eligible = [r for r in reps if len(members[r]) > 2]
    chosen = list(dict.fromkeys([eligible[0], eligible[len(eligible) // 2]])) if eligible else []
    configs = [c for r in chosen for c in members[r]]
    assert len(configs) >= 6, f"{name}: too few GROUP_SIZE_M siblings in the space to check"
    pool = census_pools["mi300x"]
    store = Store(tmp_path / "c.db")
    inferred = take_census(pool, name, shape, "bf16", configs=configs, store=store)
    each = take_census(pool, name, shape, "bf16", configs=configs, siblings=False)
    assert inferred.siblings == len(configs) - len(chosen) and each.siblings == 0
    by_inferred = {r.config: r for r in inferred.rows}
    by_each = {r.config: r for r in each.rows}
    for c in configs:
        a, b = by_inferred[c], by_each[c]
        assert [getattr(a, f) for f in RESOURCES] == [getattr(b, f) for f in RESOURCES], c
        if c in chosen:
            assert a.sibling_of is None and a.binary == b.binary
        else:  # different code from its representative: never one binary, so never pruned as a duplicate of it
            assert a.sibling_of == group[c] and a.binary is None and b.binary != by_each[group[c]].binary
    stored = store.census_for(inferred.key)
    assert {c: r.sibling_of for c, r in stored.items() if c in by_inferred} == \
        {c: by_inferred[c].sibling_of for c in by_inferred}
    store.close()


def test_an_nvidia_census_compiles_every_tile_order_sibling(census_pools):
    """On sm_90 GROUP_SIZE_M=1 changes a GEMM tile's registers and occupancy: no inferred rows for an NVIDIA target."""
    from flytune_nb.engine.census_pool import sibling_groups

    spec, dev = get_kernel("matmul"), TARGETS["h200"].device()
    shape = {"M": 256, "N": 4096, "K": 4096}
    space = spec.configs(shape, "bf16", dev)
    group = sibling_groups(space, spec.schedule_knobs)
    rep = next(r for r in space if group[r] == r and sum(group[c] == r for c in space) >= 3)
    configs = [c for c in space if group[c] == rep]
    s = take_census(census_pools["h200"], "matmul", shape, "bf16", configs=configs)
    assert s.siblings == 0 and s.compiled == len(set(configs) | {s.default.config})
    assert all(r.binary for r in s.rows)


def test_a_config_that_does_not_compile_or_cannot_launch_records_why(census_pools):
    """Triton's CompilationError reads "at 30:14:" and a source excerpt; the cause is chained, one level per inlined
    function. The census row and the summary must say the cause and the kernel's line, not "at 30:14:". And
    num_warps=32 compiles for gfx942 without a word, 2048 work-items a workgroup, which no launch takes."""
    from flytune_nb.core.config import Config
    from flytune_nb.measure.census import format_summary

    s = take_census(census_pools["mi300x"], "rmsnorm", {"M": 4, "N": 1024}, "bf16", configs=[
        Config({"BLOCK_N": 1000}, num_warps=4), Config({"BLOCK_N": 1024}, num_warps=32)])
    bad = {r.config.num_warps: r for r in s.rows if not r.ok}
    assert sorted(bad) == [4, 32] and s.default.ok
    assert bad[4].error.startswith("CompilationError: ValueError: Shape element 0 must be a power of 2 (line ")
    assert "tl.zeros([BLOCK_N]" in bad[4].error and bad[4].error in format_summary(s)
    assert bad[32].error == "num_warps=32 is 2048 work-items a workgroup on gfx942 (64-wide waves); at most 1024 launch"


def test_a_compile_error_line_is_the_cause_whichever_end_the_compiler_puts_it():
    from flytune_nb.errors import compile_error_line

    class DSLCompileError(Exception):
        pass

    flydsl = DSLCompileError("lld invocation failed\n  note: see current operation: gpu.module\n\nDSL Traceback (most "
                             "recent operation last):\n  File \"kernel.py\", line 148\n    @flyc.jit\n    ^")
    assert compile_error_line(flydsl) == "DSLCompileError: lld invocation failed"
    assert compile_error_line(RuntimeError("")) == "RuntimeError"
    assert compile_error_line(ValueError("one line")) == "ValueError: one line"

    class CompilationError(Exception):  # Triton's layout: "at L:C:", the excerpt, the caret, sometimes a message
        pass

    def raised(make):
        try:
            make()
        except Exception as e:  # noqa: BLE001
            return e

    def builtin():  # a failing builtin called in the kernel: its repr after the caret, the cause chained
        try:
            raise ValueError("arange's range must be a power of 2")
        except ValueError as v:
            raise CompilationError("at 28:11:\n    cols = tl.arange(0, BLOCK_N)\n           ^\n"
                                   "ValueError(\"arange's range must be a power of 2\")") from v

    def helper_assert():  # a static_assert in an inlined helper: the message on the inner excerpt, no cause
        try:
            raise CompilationError("at 3:4:\n    tl.static_assert(BLOCK % 16 == 0)\n    ^\nstatic_assert failed: BLOCK % 16")
        except CompilationError as c:
            raise CompilationError("at 40:8:\n    y = _helper(x, BLOCK)\n        ^") from c

    def unrelated_context():  # raised while handling another error, which says nothing about this one
        try:
            raise KeyError("a cache miss")
        except KeyError:
            raise CompilationError("at 5:4:\n    x = y\n    ^\nNameError('y')") from None

    assert compile_error_line(raised(builtin)) == (
        "CompilationError: ValueError: arange's range must be a power of 2 (line 28: cols = tl.arange(0, BLOCK_N))")
    assert compile_error_line(raised(helper_assert)) == (
        "CompilationError: static_assert failed: BLOCK % 16 (line 40: y = _helper(x, BLOCK))")
    assert compile_error_line(raised(unrelated_context)) == "CompilationError: NameError('y') (line 5: x = y)"
