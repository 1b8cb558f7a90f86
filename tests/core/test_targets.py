"""The named GPUs a census compiles for: what they describe, how they are named, and what is marked unverified."""
import dataclasses

import pytest

from flytune_nb.artifacts.files import device_name_problem
from flytune_nb.core.device import DESCRIBED, DeviceInfo, from_properties
from flytune_nb.core.targets import ARCHS, KiB, TARGETS, arch_rules, get_target
from flytune_nb.errors import UsageError
from tests.conftest import H200_PROPS, MI300X_PROPS


def test_every_target_describes_a_gpu_with_the_properties_the_spaces_read():
    for t in TARGETS.values():
        d = t.device()
        assert d.is_gpu and d.torch_device == "meta" and d.arch in ARCHS and not device_name_problem(d.name)
        assert d.sm_count > 0 and d.l2_bytes > 0 and d.total_memory > 0 and d.smem_bytes > 0
        assert t.warp_size == (64 if t.backend == "hip" else 32) and t.rules.backend == t.backend
        assert set(t.unverified) <= {f.name for f in dataclasses.fields(t)}


def test_targets_match_what_the_real_devices_report():
    """The MI300X and H200 as torch.cuda.get_device_properties reports them (the test doubles of tests/conftest.py)
    give the same names, arch and limits the spaces read, and h200 is the H200 flytune's sweeps ran on."""
    for alias, props, hip in (("mi300x", MI300X_PROPS, True), ("h200", H200_PROPS, False)):
        real, t = from_properties(props, hip=hip), TARGETS[alias].device()
        assert (real.backend, real.name, real.arch, real.sm_count) == (t.backend, t.name, t.arch, t.sm_count)
    assert from_properties(MI300X_PROPS, hip=True).smem_bytes == TARGETS["mi300x"].smem_per_block
    assert dataclasses.replace(TARGETS["h200"].device(), torch_device="cuda:0") == DESCRIBED["NVIDIA_H200"]


def test_gfx950_has_160_kib_of_lds_and_gfx942_64():
    assert TARGETS["mi355x"].device().smem_bytes == 160 * KiB == ARCHS["gfx950"].smem_per_unit
    assert TARGETS["mi300x"].device().smem_bytes == 64 * KiB == ARCHS["gfx942"].smem_per_unit
    assert "units" in TARGETS["b200"].unverified  # 148 SMs: not confirmed from a vendor page


def test_a_target_is_found_by_alias_or_device_name_and_a_typo_is_one_line():
    assert get_target("MI300X") is get_target("AMD_Instinct_MI300X") is TARGETS["mi300x"]
    with pytest.raises(UsageError, match="unknown target 'h20'.*Did you mean 'h200'"):
        get_target("h20")


def test_an_architecture_named_as_a_target_lists_the_gpus_of_it():
    """The README names the census by architecture (gfx942, sm_90); a target is one GPU (its CU count and memory
    decide occupancy and the exports' device name), so an arch is answered with the GPUs it covers."""
    import random

    arch = random.choice(sorted({t.arch for t in TARGETS.values()}))
    gpus = [t.alias for t in TARGETS.values() if t.arch == arch]
    with pytest.raises(UsageError, match=f"is an architecture; a target is one GPU of it: {', '.join(gpus)}$"):
        get_target(random.choice([arch, arch.upper()]))


def test_an_arch_outside_the_table_takes_its_familys_rules_with_its_own_shared_memory():
    d = DeviceInfo("hip", "AMD_Instinct_MI210", "gfx90a", 104, 8 << 20, 64 << 30, "meta", 64 * KiB)
    assert arch_rules(d).vgprs_per_lane == 512 and arch_rules(d).smem_per_unit == 64 * KiB
    assert arch_rules(dataclasses.replace(TARGETS["h100"].device(), arch="sm_89")).max_warps_per_unit == 64
