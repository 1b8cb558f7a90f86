"""Each private FlyDSL internal flytune_nb._compat.flydsl touches, checked against the installed FlyDSL itself: a
release that renames or moves one fails here, on the CPU, before a fallback silently takes over."""
import hashlib
import inspect

import pytest
import torch

from flytune_nb._compat import flydsl as compat


@pytest.fixture(scope="module")
def fx(flydsl_installed):
    import flydsl.expr as fx

    return fx


def test_the_installed_flydsl_is_one_these_touches_were_verified_against(flydsl_installed):
    import flydsl

    assert compat.installed_version() == flydsl.__version__
    assert compat.verified(), f"flydsl {flydsl.__version__}: check each touch below, then add it to VERIFIED"


def test_compiler_key_is_flydsls_own_fingerprint(flydsl_installed):
    from flydsl.compiler import jit_function

    key = jit_function._flydsl_key()
    assert isinstance(key, str) and flydsl_installed.version() in key  # its version is one of the parts
    assert compat.compiler_key() == hashlib.sha256(key.encode()).hexdigest()[:16]
    assert len(compat.record_digest()) == 16  # the fallback is readable too


def test_the_cache_invalidating_variables_are_read_from_flydsl(flydsl_installed):
    from flydsl.compiler import jit_function

    names = compat.cache_invalidating_env()
    assert set(jit_function._CACHE_INVALIDATING_ENV_VARS) <= set(names)
    assert set(names) == set(compat.KNOWN_ENV)  # the fallback list is this FlyDSL's list


def test_compile_hints_are_flydsls_thread_local_context(flydsl_installed):
    from flydsl.compiler.kernel_function import CompilationContext

    assert CompilationContext.get_compile_hints() == {}
    with compat.compile_hints({"waves_per_eu": 4}):
        assert CompilationContext.get_compile_hints() == {"waves_per_eu": 4}
    assert CompilationContext.get_compile_hints() == {}


def test_signature_constexpr_and_stream_of_a_jit_function(fx):
    import flydsl.compiler as flyc

    @flyc.jit
    def probe(x: fx.Tensor, N: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
        pass

    params = compat.jit_signature(probe).parameters
    assert list(params) == ["x", "N", "stream"]
    assert compat.is_constexpr(params["N"].annotation) and not compat.is_constexpr(params["x"].annotation)
    assert compat.is_stream(params["stream"].annotation) and not compat.is_stream(params["N"].annotation)
    compat.check_annotation(params["N"].annotation, 8)
    for bad in (8.0, True, "8"):
        with pytest.raises(TypeError, match="expects int"):
            compat.check_annotation(params["N"].annotation, bad)
    assert isinstance(getattr(probe, "_mem_cache", None), dict)  # what forget_compiled empties
    assert inspect.isfunction(probe.func)


def test_a_compiled_functions_module_text_carries_the_kernel_metadata(flydsl_compiler):
    from flytune_nb.core.registry import get_kernel

    spec = get_kernel("flydsl_rmsnorm")
    fn = spec.extra["flydsl"].launcher()
    import flydsl.compiler as flyc

    x = torch.empty(2, 1024, dtype=torch.bfloat16, device="meta")
    with flydsl_compiler.target("gfx950"):
        compiled = flyc.compile(fn, x, x[0], x, 2, 1024, "bf16", 128, 8)
    text = compat.compiled_ir(compiled)
    assert "gpu.binary" in text and "#gpu.kernel_metadata<" in text and 'chip = "gfx950"' in text
    (r,) = flydsl_compiler.resources(compiled)
    assert (r.kernel, r.arch, r.max_workgroup) == ("flytune_rmsnorm", "gfx950", 128) and r.vgpr > 0


def test_flydsls_device_descriptor_is_where_its_tests_patch_it(flydsl_installed):
    import importlib

    at = importlib.import_module("flydsl.autotune")
    assert callable(at._device_descriptor)
    if not torch.cuda.is_available():
        assert compat.device_descriptor() is None  # no GPU: FlyDSL has no identity to look configs up by
