"""The private @triton.autotune touches of flytune_nb._compat.triton, checked against the installed Triton's own
Autotuner (its run, its cache, its disk-cache reader), not against a stand-in built to our assumptions."""
import json

import pytest
import torch
import triton
import triton.language as tl

from flytune_nb._compat import triton as tc
from flytune_nb.core.device import current_device
from tests.conftest import wall_clock

# The GPU's memory where there is one: a compiled launch refuses a CPU tensor ("cannot be accessed from Triton")
DEV = current_device().torch_device


def _big_blocks_out(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 32]


def make_kernel(**autotune):
    """A fresh autotuned kernel (its cache is per object): y = x + alpha, keyed on n."""
    @triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})
    @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (1, 2)],
                     key=["n"], prune_configs_by={"early_config_prune": _big_blocks_out}, **autotune)
    @triton.jit
    def add(x, y, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y + offs, tl.load(x + offs, mask=m) + alpha, mask=m)

    return add


def call(kernel, n, dtype=torch.float32, **kw):
    x, y = torch.randn(n, dtype=dtype, device=DEV), torch.empty(n, dtype=dtype, device=DEV)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 1.0, **kw)
    return x, y


def test_the_installed_autotuner_has_the_layout_read_here():
    add = make_kernel()
    at, outer, inner, jit = tc.unwrap_autotuned(add)
    assert [type(o).__name__ for o in outer] == ["Heuristics"] and inner == []
    assert type(jit).__name__ in ("JITFunction", "InterpretedFunction")
    fields = tc.read_autotuner(at)
    assert fields["keys"] == ["n"] and len(fields["configs"]) == 6 and fields["arg_names"][:3] == ["x", "y", "n"]
    assert fields["early_config_prune"] is _big_blocks_out and not fields["user_pre_hook"]
    assert tc.heuristic_names(outer) == ["EVEN"]
    if not tc.autotuner_layout_verified():
        pytest.skip(f"Triton {triton.__version__}: layout not among those read in source")


def test_our_key_is_the_key_run_stores_its_winner_under():
    add = make_kernel()
    at = tc.unwrap_autotuned(add)[0]
    with tc.count_benchmarks(at, wall_clock) as count:
        call(add, 100)
    seen = []
    with tc.intercepted(at, lambda *a, **k: seen.append((a, k))):
        call(add, 100)
    args, kwargs = seen[0]
    assert kwargs["grid"] is not None and kwargs["warmup"] is False and kwargs["EVEN"] is False  # outer heuristic
    ours = tc.autotune_key(at, args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
    assert list(at.cache) == [ours] == [(100, "torch.float32", "torch.float32")]
    assert count.calls == 4  # 6 configs, 2 pruned: one benchmark each
    assert "run" not in vars(at)  # the interception is gone


def test_the_dtype_part_follows_the_callers_keyword_order():
    @triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
    @triton.jit
    def two(a, b, n, B: tl.constexpr):
        pass

    at = tc.unwrap_autotuned(two)[0]
    a, b = torch.zeros(4, device=DEV), torch.zeros(4, dtype=torch.float16, device=DEV)
    with tc.count_benchmarks(at, wall_clock):
        two[(1,)](a=a, b=b, n=4)
        two[(1,)](b=b, a=a, n=4)
    assert set(at.cache) == {(4, "torch.float32", "torch.float16"), (4, "torch.float16", "torch.float32")}
    assert tc.autotune_key(at, (), {"b": b, "a": a, "n": 4}) == (4, "torch.float16", "torch.float32")


def test_a_primed_key_benchmarks_nothing_and_an_untuned_one_benchmarks_the_pruned_configs():
    add = make_kernel()
    at = tc.unwrap_autotuned(add)[0]
    ours = triton.Config({"BLOCK": 8}, num_warps=2, num_stages=2)  # not even one of the decorator's configs
    tc.prime_cache(at, {(100, "torch.float32", "torch.float32"): ours})
    with tc.count_benchmarks(at, wall_clock) as count:
        x, y = call(add, 100)
        assert count.calls == 0 and at.best_config is ours and torch.allclose(y, x + 1)
        seen = []
        with tc.intercepted(at, lambda *a, **k: seen.append((a, k))):
            call(add, 96)
        pruned = tc.pruned_configs(at, seen[0][0], seen[0][1])
        x, y = call(add, 96)
    assert count.calls == len(pruned) == 4 and torch.allclose(y, x + 1)
    assert [c.kwargs["BLOCK"] for c in pruned] == [16, 16, 32, 32]


def test_hits_cache_asks_the_real_run_and_launches_nothing():
    add = make_kernel()
    at = tc.unwrap_autotuned(add)[0]
    x, y = torch.randn(100, device=DEV), torch.full((100,), float("nan"), device=DEV)
    launch = lambda: add[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100, 1.0)  # noqa: E731
    assert tc.hits_cache(at, launch) is False
    tc.prime_cache(at, {(100, "torch.float32", "torch.float32"): at.configs[0]})
    assert tc.hits_cache(at, launch) is True
    assert torch.isnan(y).all()  # nothing ran
    assert "run" not in vars(at.fn) and "prune_configs" not in vars(at)


def test_launch_config_runs_one_config_with_its_pre_hook():
    add = make_kernel()
    at = tc.unwrap_autotuned(add)[0]
    seen = []
    config = triton.Config({"BLOCK": 32}, num_warps=1, maxnreg=64, pre_hook=lambda nargs: seen.append(dict(nargs)))
    with tc.intercepted(at, lambda *a, **k: tc.launch_config(at, a, k, config)):
        x, y = call(add, 100)
    assert torch.allclose(y, x + 1) and not at.cache
    assert seen[0]["BLOCK"] == 32 and seen[0]["EVEN"] is False and seen[0]["maxnreg"] == 64 and seen[0]["n"] == 100
    with pytest.raises(ValueError, match="BLOCK are given by the caller and by the autotuner's config"):
        tc.launch_config(at, (x, y, 100, 1.0), {"grid": (1,), "warmup": False, "BLOCK": 16, "EVEN": False}, config)


def test_counting_benchmarks_leaves_the_autotuner_as_it_was():
    add = make_kernel(do_bench=wall_clock)
    at = tc.unwrap_autotuned(add)[0]
    with tc.count_benchmarks(at) as count:  # its own benchmarker: do_bench=
        call(add, 100)
    assert count.calls == 4 and "do_bench" not in vars(at)


def test_autotuned_name_is_the_function_under_every_layer():
    at = tc.unwrap_autotuned(make_kernel())[0]  # an outer @triton.heuristics, then @triton.autotune, then @triton.jit
    assert tc.autotuned_name(at) == "add"


def test_unreadable_objects_are_named():
    from flytune_nb.errors import UsageError

    @triton.jit
    def plain(x):
        pass

    with pytest.raises(tc.AutotunerLayoutError, match="plain is a jit function without @triton.autotune"):
        tc.unwrap_autotuned(plain)
    twice = triton.autotune(configs=[triton.Config({})], key=[])(make_kernel().fn)
    with pytest.raises(tc.AutotunerLayoutError, match="two @triton.autotune decorators"):
        tc.unwrap_autotuned(twice)
    at = tc.unwrap_autotuned(make_kernel())[0]
    del at.keys
    with pytest.raises(tc.AutotunerLayoutError, match="Autotuner has no keys") as e:
        tc.read_autotuner(at)
    assert isinstance(e.value, UsageError)  # under the one root the CLI and the workbench catch


def test_config_fields_report_what_flytune_cannot_carry():
    plain = tc.config_fields(triton.Config({"B": 1}, num_warps=2, num_stages=4, num_ctas=2, maxnreg=32))
    assert plain["unsupported"] == {} and (plain["num_ctas"], plain["maxnreg"], plain["kwargs"]) == (2, 32, {"B": 1})
    if "ir_override" in vars(triton.Config({})):
        assert tc.config_fields(triton.Config({}, ir_override="k.ttgir"))["unsupported"] == {"ir_override": "k.ttgir"}
    made = tc.triton_config({"B": 2}, num_warps=8, num_stages=None, num_ctas=None, maxnreg=40)
    assert (made.kwargs, made.num_warps, made.maxnreg) == ({"B": 2}, 8, 40)


def test_a_disk_entry_written_here_is_read_by_tritons_own_reader(tmp_path, monkeypatch):
    """Triton's check_disk_cache (3.4+) on a compiled JITFunction, with a stand-in driver reporting an H200's target
    (flytune_nb.backends.triton): the entry write_disk_entry writes is taken as the autotuner's own, and the
    benchmark function is not called."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from flytune_nb.backends.triton import without_device

    if not hasattr(Autotuner, "check_disk_cache"):
        pytest.skip("this Triton has no on-disk autotune cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    def body(x, n, BLOCK: tl.constexpr):
        pass

    jit = JITFunction(body)  # compiled kind: the decorator makes an interpreted one on the CPU
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32) for w in (1, 4)]
    at = Autotuner(jit, jit.arg_names, configs, ["n"], None, None)
    assert tc.disk_cache_supported(at) == ""
    key = (4096, "torch.bfloat16")
    with without_device(("cuda", 90, 32)):
        path = tc.write_disk_entry(at, key, configs, configs[3], 0.012)
        benched = []
        assert at.check_disk_cache(key, configs, lambda: benched.append(1)) is True
        assert benched == [] and at.cache[key] == configs[3]
        # another pruned list is another entry: Triton would tune (and write what it timed)
        at.configs_timings = {}
        assert at.check_disk_cache(key, configs[:2], lambda: benched.append(1)) is False and benched == [1]
    body_json = json.loads(open(path).read())
    assert body_json["configs_timings"][0][0]["kwargs"] == {"BLOCK": 32} and body_json["key"] == list(key)
    if type(tc.unwrap_autotuned(make_kernel())[3]).__name__ == "InterpretedFunction":
        assert tc.disk_cache_supported(tc.unwrap_autotuned(make_kernel())[0]) == ("the kernel is not compiled "
                                                                                  "(Triton's interpreter)")
