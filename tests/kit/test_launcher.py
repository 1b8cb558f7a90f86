"""flytune_nb.kit.launcher: the remembered-kernel launch path, checked on CPU against a stand-in for Triton's runtime.

The real path runs on the GPU (test_gpu.py: misaligned views, every kernel's results); here the stand-in records
which route each call took, so the cache's key and argument order are pinned down without a driver."""
from types import SimpleNamespace

import pytest

from flytune_nb._compat import triton as tc
from flytune_nb.core.config import Config
from flytune_nb.kit import launcher as L


class Param:
    def __init__(self, name, default=None, has_default=False):
        self.name, self.default, self.has_default = name, default, has_default


class FakeJIT:
    """Enough of JITFunction: params, device_caches[dev][3] (the backend), hooks, fn[grid](...) -> a kernel."""

    def __init__(self, names, defaults=None, kernel=None):
        defaults = defaults or {}
        self.kernel = kernel  # what fn[grid](...) returns; None: a stand-in that records direct launches
        self.params = [Param(n, defaults.get(n), n in defaults) for n in names]
        self.device_caches = {0: (None, None, None, "backend", None)}
        self.used_global_vals = {}
        self.pre_run_hooks = []
        self.triton_calls = []  # (grid, args, kwargs) per call that went through "Triton"
        self.kernel_runs = []  # the positional arguments of each direct launch
        self.warmups = []  # (grid, args, kwargs) per compile-only call

    def warmup(self, *args, grid, **kwargs):
        self.warmups.append((grid, args, kwargs))

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.triton_calls.append((grid, args, kwargs))
            if self.kernel is not None:
                return self.kernel
            return SimpleNamespace(run=lambda *a: self.kernel_runs.append(a), function="fn", packed_metadata="pm")
        return call


class Ptr:
    """A stand-in tensor: its specialisation is its 16-byte alignment, as Triton's is."""

    def __init__(self, addr):
        self.addr = addr


def fake_spec(backend, arg, is_const, specialize, align):
    assert backend == "backend"
    if isinstance(arg, Ptr):
        return ("*fp32", "D" if arg.addr % 16 == 0 else None)
    if isinstance(arg, int):
        return ("constexpr", 1) if arg == 1 else ("i32", "D" if arg % 16 == 0 else None)
    return ("fp32", None)


class Chain:
    """Like triton.knobs.HookChain: callable, with the hooks in ``calls``."""

    def __init__(self, *calls):
        self.calls = list(calls)

    def __call__(self, *a):
        for c in self.calls:
            c(*a)


@pytest.fixture(autouse=True)
def triton_36_layout(monkeypatch):
    """The stand-ins here are Triton 3.6's launcher layout, the one the fast path is verified for; the installed
    Triton may be another (torch's CUDA wheels bring their own), whose own layout tests/compat reads."""
    monkeypatch.setattr(tc, "version", lambda: (3, 6))


@pytest.fixture
def rt(monkeypatch):
    # Triton 3.6's defaults: empty hook chains, never None
    knobs = SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=Chain(), launch_exit_hook=Chain(), debug=False),
                            compilation=SimpleNamespace(instrumentation_mode=""))
    fake = dict(knobs=knobs, spec=fake_spec, jit=FakeJIT, device=lambda: 0, stream=lambda dev: 1234,
                specialize=lambda backend, args: tuple(fake_spec(backend, a, False, True, True) for a in args))
    monkeypatch.setattr(L, "_RT", fake)
    monkeypatch.setattr(L, "_ENTRIES", {})
    return fake


CFG = Config({"BLOCK": 64}, num_warps=4)


def test_second_call_launches_the_remembered_kernel_with_constexprs_in_signature_order(rt):
    fn = FakeJIT(["X", "Y", "n", "eps", "BLOCK", "SINGLE"])
    x, y = Ptr(4096), Ptr(8192)
    L.launch(fn, (7,), (x, y, 4096, 1e-6), CFG, SINGLE=True, BLOCK=64)  # kwargs in another order than the signature
    assert len(fn.triton_calls) == 1 and fn.kernel_runs == []
    assert fn.triton_calls[0][2] == {"SINGLE": True, "BLOCK": 64, "num_warps": 4, "num_stages": 1}
    x2, y2 = Ptr(1 << 20), Ptr(2 << 20)  # new buffers, same alignment: the same kernel
    L.launch(fn, (7,), (x2, y2, 4096, 1e-6), CFG, SINGLE=True, BLOCK=64)
    assert len(fn.triton_calls) == 1
    assert fn.kernel_runs == [(7, 1, 1, 1234, "fn", "pm", None, None, None, x2, y2, 4096, 1e-6, 64, True)]


@pytest.mark.parametrize("change", ["misaligned", "int_class", "config", "meta", "debug", "device"])
def test_anything_triton_specialises_on_misses_the_cache(rt, change):
    fn = FakeJIT(["X", "n", "BLOCK"])
    fn.device_caches[1] = fn.device_caches[0]
    L.launch(fn, (1,), (Ptr(64), 32), CFG, BLOCK=64)
    args, cfg, meta = (Ptr(64), 32), CFG, {"BLOCK": 64}
    if change == "misaligned":
        args = (Ptr(66), 32)  # a view one bf16 element in: Triton compiles it without the alignment assumption
    elif change == "int_class":
        args = (Ptr(64), 33)
    elif change == "config":
        cfg = CFG.replace(num_warps=8)
    elif change == "meta":
        meta = {"BLOCK": 128}
    elif change == "debug":
        rt["knobs"].runtime.debug = True
    elif change == "device":
        rt["device"] = lambda: 1
    L.launch(fn, (1,), args, cfg, **meta)
    assert len(fn.triton_calls) == 2 and fn.kernel_runs == []


def test_grid_is_padded_to_three_dimensions(rt):
    fn = FakeJIT(["X", "BLOCK"])
    for _ in range(2):
        L.launch(fn, (3, 5), (Ptr(0),), CFG, BLOCK=64)
    assert fn.kernel_runs[0][:3] == (3, 5, 1)


def test_missing_constexpr_takes_the_signature_default(rt):
    fn = FakeJIT(["X", "BLOCK", "FLAG"], defaults={"FLAG": False})
    for _ in range(2):
        L.launch(fn, (1,), (Ptr(0),), CFG, BLOCK=64)
    assert fn.kernel_runs[0][-2:] == (64, False)


@pytest.mark.parametrize("why", ["enter_hook", "exit_hook", "plain_hook", "globals", "pre_run_hook", "callable_grid", "not_jit"])
def test_what_it_cannot_vouch_for_goes_through_triton_every_time(rt, why):
    fn = FakeJIT(["X", "BLOCK"])
    grid = (1,)
    if why == "enter_hook":
        rt["knobs"].runtime.launch_enter_hook = Chain(print)  # a profiler: it needs Triton's launch metadata
    elif why == "exit_hook":
        rt["knobs"].runtime.launch_exit_hook = Chain(print)
    elif why == "plain_hook":
        rt["knobs"].runtime.launch_enter_hook = print  # older Triton: a bare callable or None
    elif why == "globals":
        fn.used_global_vals = {("SCALE", None): (2, {})}
    elif why == "pre_run_hook":
        fn.pre_run_hooks = [lambda *a, **k: None]
    elif why == "callable_grid":
        grid = lambda meta: (1,)  # noqa: E731
    elif why == "not_jit":
        rt["jit"] = type("Other", (), {})
    for _ in range(3):
        L.launch(fn, grid, (Ptr(0),), CFG, BLOCK=64)
    assert len(fn.triton_calls) == 3 and fn.kernel_runs == []


def test_unhashable_meta_goes_through_triton(rt):
    fn = FakeJIT(["X", "BLOCK"])
    for _ in range(2):
        L.launch(fn, (1,), (Ptr(0),), CFG, BLOCK=[64])
    assert len(fn.triton_calls) == 2


def test_a_triton_whose_launcher_layout_is_unverified_takes_its_public_path_every_call(rt, monkeypatch):
    monkeypatch.setattr(tc, "version", lambda: (3, 7))
    fn = FakeJIT(["X", "BLOCK"])
    for _ in range(3):
        L.launch(fn, (1,), (Ptr(0),), CFG, BLOCK=64)
    assert len(fn.triton_calls) == 3 and fn.kernel_runs == []
    assert all(kw == {"BLOCK": 64, "num_warps": 4, "num_stages": 1} for _, _, kw in fn.triton_calls)


def test_interpreter_uses_tritons_path(monkeypatch):
    """Under TRITON_INTERPRET (CI) nothing is remembered: the interpreter has no compiled kernel to keep."""
    monkeypatch.setattr(L, "_RT", {})
    monkeypatch.setattr(L, "_ENTRIES", {})
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn = FakeJIT(["X", "BLOCK"])
    for _ in range(2):
        L.launch(fn, (1,), (Ptr(0),), CFG, BLOCK=64)
    assert len(fn.triton_calls) == 2 and L._ENTRIES == {}


def test_cuda_launcher_without_scratch_is_called_at_its_c_entry_in_tritons_argument_order(rt):
    """Triton 3.6's CudaLauncher.__call__(gx, gy, gz, stream, function, packed, meta, enter, exit, *args) calls
    launch(gx, gy, gz, stream, function, coop, pdl, global_scratch, profile_scratch, packed, meta, enter, exit,
    *args); with no scratch to allocate we make that call ourselves."""
    calls = []

    class CudaLauncher:
        global_scratch_size = profile_scratch_size = 0
        launch_cooperative_grid, launch_pdl = False, True

        def launch(self, *a):
            calls.append(a)

        def __call__(self, *a):
            raise AssertionError("the Python wrapper should be skipped")

    kernel = SimpleNamespace(run=CudaLauncher(), function="fn", packed_metadata="pm")
    fn = FakeJIT(["X", "n", "BLOCK"], kernel=kernel)
    x = Ptr(0)
    for _ in range(2):
        L.launch(fn, (2,), (x, 32), CFG, BLOCK=64)
    assert calls == [(2, 1, 1, 1234, "fn", False, True, None, None, "pm", None, None, None, x, 32, 64)]


def test_cuda_launcher_that_needs_scratch_keeps_tritons_wrapper():
    """A kernel that asks for scratch memory goes through the launcher's Python wrapper (which allocates it); one
    that needs none is called at the launcher's C entry, with the cooperative-grid and PDL flags it was built with."""
    from flytune_nb._compat.triton import compiled_launcher

    def c_entry(*args):  # a sentinel of our own: another library may have replaced builtins.print
        return args

    class CudaLauncher:
        global_scratch_size, profile_scratch_size = 256, 0
        launch, launch_cooperative_grid, launch_pdl = staticmethod(c_entry), False, True

    kernel = SimpleNamespace(run=CudaLauncher(), function="fn", packed_metadata="pm")
    call, function, mid = compiled_launcher(kernel)
    assert call is kernel.run and mid == ("pm", None, None, None)
    CudaLauncher.global_scratch_size = 0
    call, function, mid = compiled_launcher(kernel)
    assert call is c_entry and function == "fn" and mid == (False, True, None, None, "pm", None, None, None)


def test_compile_only_compiles_as_triton_would_launch_and_launches_nothing(rt):
    """The precompile pool's mode: Triton's warmup with exactly the arguments a launch would pass (so the on-disk
    cache entry is the one the timing worker looks up), no launch, nothing remembered; the mode ends with the block,
    also when the kernel's run raises inside it."""
    fn = FakeJIT(["X", "n", "BLOCK"])
    args = (Ptr(64), 32)
    with L.compile_only("cuda"):
        L.launch(fn, (3,), args, CFG, BLOCK=64)
    assert fn.triton_calls == [] and fn.kernel_runs == [] and L._ENTRIES == {}
    assert fn.warmups[0][2] == {"BLOCK": 64, "num_warps": 4, "num_stages": 1}  # CUDA's launch options
    L.launch(fn, (3,), args, CFG, BLOCK=64)
    assert len(fn.warmups) == 1 and fn.warmups == fn.triton_calls
    with pytest.raises(ZeroDivisionError), L.compile_only("cuda"):
        1 / 0
    L.launch(fn, (3,), args, CFG, BLOCK=64)
    assert len(fn.warmups) == 1 and len(fn.kernel_runs) == 1
