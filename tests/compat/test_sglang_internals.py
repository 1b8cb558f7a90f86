"""Each private SGLang internal flytune_nb._compat.sglang touches, checked against the installed SGLang itself: a
release that renames or moves one fails here, on the CPU, before a fallback silently takes over."""
import importlib
import types

import pytest

from flytune_nb._compat import sglang as compat

pytest.importorskip("sglang")


@pytest.fixture(scope="module")
def triton_utils():
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.errors import KernelUnavailable

    try:
        km = importlib.import_module(get_kernel("sglang_fused_moe").run.__module__)
        return km.sglang().triton_utils  # imported as the kernel imports it (stand-ins for a CPU machine)
    except KernelUnavailable as e:
        pytest.skip(str(e))


def test_the_installed_sglang_is_one_these_touches_were_verified_against():
    import sglang

    assert compat.installed_version() == sglang.__version__
    assert compat.verified(), f"sglang {sglang.__version__}: check each touch below, then add it to VERIFIED"


def test_the_reset_writes_what_override_config_sets_and_get_config_reads(triton_utils):
    tu = triton_utils
    assert tu.get_config() is None
    forced = {"BLOCK_SIZE_M": 16}
    with pytest.raises(RuntimeError, match="inside"):
        with tu.override_config(forced):
            assert vars(tu)["_config"] is forced
            raise RuntimeError("inside")
    assert tu.get_config() is forced  # left behind: what the reset is for
    assert compat.reset_moe_config(tu, None) is True
    assert tu.get_config() is None
    with tu.override_config(forced):  # SGLang's own context manager still works over what the reset wrote
        assert tu.get_config() is forced
    assert tu.get_config() is None


def test_a_module_without_the_global_is_left_alone():
    tu = types.ModuleType("triton_utils")
    assert compat.reset_moe_config(tu, {"BLOCK_SIZE_M": 16}) is False
    assert not hasattr(tu, "_config")
