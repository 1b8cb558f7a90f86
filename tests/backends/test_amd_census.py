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
from flytune_nb.engine.census_pool import CensusPool, census_cache_dir, take_census
from tests.conftest import CENSUS_CACHE

KERNELS = ("rmsnorm", "fused_add_rmsnorm", "softmax", "matmul", "fused_moe")
SAMPLE = {"rmsnorm": 24, "fused_add_rmsnorm": 24, "softmax": 24, "matmul": 36, "fused_moe": 14}
BATCH = (1, 4096)  # the defaults' other batch sizes: decode and prefill
TARGET_NAMES = ("mi300x", "mi355x")


@pytest.fixture(scope="module")
def amd_census():
    """{(target, kernel): CensusSummary of the example shape} and {(target, kernel, M): default's row}: one census
    process per target, both targets at once."""
    import os

    os.environ.setdefault("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE))
    spaces, defaults, errors = {}, {}, []

    def run(alias: str) -> None:
        dev = TARGETS[alias].device()
        pool = CensusPool(dev, jobs=1, cache_dir=census_cache_dir(dev))
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
        finally:
            pool.close()

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
