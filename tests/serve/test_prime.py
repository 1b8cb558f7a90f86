"""flytune_nb.prime: the unmodified decorated kernel, called by its own code, launches the exported winner for every
primed key and benchmarks nothing; any other key is tuned by the decorator exactly as it would be without priming."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import triton

import flytune_nb
from flytune_nb import Sweep
from flytune_nb._compat import triton as tc
from flytune_nb.artifacts.export import export
from flytune_nb.artifacts.files import PROVENANCE, file_name, render, triton_dir_name
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.errors import UsageError
from flytune_nb.serve.lookup import ArtifactWarning
from flytune_nb.serve.prime import CoarseKeyWarning
from tests.conftest import wall_clock

ADOPTED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kit", "adopted.py")


def load(attr):
    spec = get_kernel(f"{ADOPTED}:{attr}")
    spec.extra["adopted"].autotuner.cache.clear()  # the kernel object outlives each test
    return spec


def write_export(root, spec, rest, dtype, device, table, p50=None):
    """A hand-written export: {batch: Config} plus provenance (best latency per entry when ``p50`` gives one)."""
    folder = root / spec.name / triton_dir_name(triton.__version__)
    folder.mkdir(parents=True, exist_ok=True)
    name = file_name(spec, rest, device.name, dtype)
    (folder / name).write_text(render({m: c.to_dict() for m, c in table.items()}))
    prov = {str(m): {"shape": rest, "dtype": dtype, **({"best_p50_ms": p50[m]} if p50 else {})} for m in table}
    (folder / PROVENANCE).write_text(json.dumps({name: prov}))


def axpy_call(kernel, n):
    """How a library calls the kernel, written independently of the adopted launch."""
    x, acc = torch.randn(n), torch.randn(n)
    want = acc + 2 * x
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, acc, n, 2.0)
    return acc, want


def test_primed_keys_launch_the_winner_with_zero_benchmarks_and_other_keys_tune_as_before(tmp_path, dev):
    spec = load("AXPY")
    store = Store(tmp_path / "r.db")
    results = Sweep(spec, "N=64,100", ["fp32"], db=store, isolate=False).run()
    export(store, tmp_path / "exports")
    ad = spec.extra["adopted"]
    at, kernel = ad.autotuner, ad.kernel
    report = flytune_nb.prime(kernel, tmp_path / "exports")  # the decorated kernel object itself
    assert sorted(k.key for k in report.keys) == [(64, "torch.float32", "torch.float32"),
                                                 (100, "torch.float32", "torch.float32")]
    assert not report.mismatched and not report.coarse and len(report.files) == 1
    for r in results:
        n = r.shape["N"]
        with tc.count_benchmarks(at, wall_clock) as count:
            acc, want = axpy_call(kernel, n)
        assert count.calls == 0 and torch.allclose(acc, want)
        # the exported winner (the selection stage's pick, not necessarily the search's fastest: within the tie band
        # the default is kept), as the decorator's own Config object
        assert at.best_config is ad.to_triton(r.pick.config)
    with tc.count_benchmarks(at, wall_clock) as count:  # never tuned: the decorator's own search, unchanged
        acc, want = axpy_call(kernel, 50)
    assert count.calls == 4 and torch.allclose(acc, want)  # 6 configs, 2 pruned by its prune_configs_by
    assert (50, "torch.float32", "torch.float32") in at.cache
    assert "primed from 1 files" in report.summary()


def test_prime_takes_the_spec_its_reference_or_its_name(tmp_path, dev):
    spec = load("AXPY")
    cfg = spec.configs({"N": 64}, "fp32", dev)[-1]
    write_export(tmp_path, spec, {}, "fp32", dev, {64: cfg})
    for handle in (spec, f"{ADOPTED}:AXPY", "axpy_acc"):
        spec.extra["adopted"].autotuner.cache.clear()
        report = flytune_nb.prime(handle, tmp_path)
        assert [k.config for k in report.keys] == [cfg]
    with pytest.raises(UsageError, match="not an adopted @triton.autotune kernel"):
        flytune_nb.prime("rmsnorm", tmp_path)
    with pytest.raises(UsageError, match=r"prime: .*nowhere does not exist; give the folder `flytune export --out`"):
        flytune_nb.prime(spec, tmp_path / "nowhere")
    (tmp_path / "runs.db").write_bytes(b"")
    with pytest.raises(UsageError, match="runs.db is a file, not a folder of exports"):
        flytune_nb.prime(spec, tmp_path / "runs.db")
    (tmp_path / "empty").mkdir()
    with pytest.warns(ArtifactWarning, match="nothing primed .no exported configs for axpy_acc under"):
        empty = flytune_nb.prime(spec, tmp_path / "empty")
    assert empty.keys == [] and "no exported configs for axpy_acc" in empty.note
    with pytest.warns(ArtifactWarning, match="looks like the kernel's own folder: give its parent"):
        flytune_nb.prime(spec, tmp_path / "axpy_acc")


def axpy_export_with_provenance(root, dev, **fields):
    """One fp32 AXPY file for N=64, every provenance entry of it given ``fields``: (spec, config, folder)."""
    spec = load("AXPY")
    cfg = spec.configs({"N": 64}, "fp32", dev)[-1]
    write_export(root, spec, {}, "fp32", dev, {64: cfg})
    folder = next(root.rglob(PROVENANCE)).parent
    prov = json.loads((folder / PROVENANCE).read_text())
    for entry in next(iter(prov.values())).values():
        entry.update(fields)
    (folder / PROVENANCE).write_text(json.dumps(prov))
    return spec, cfg, folder


def test_a_kernel_no_spec_adopts_is_refused_by_its_functions_name(tmp_path):
    @triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
    @triton.jit
    def never_adopted(x, n, B: triton.language.constexpr):
        pass

    with pytest.raises(UsageError, match="prime: no spec in this process adopts never_adopted; import the module"):
        flytune_nb.prime(never_adopted, tmp_path)


@pytest.mark.parametrize("name", ["Intel(R)_Arc(TM)_A770_Graphics", "Lab_GPU_[rev_2]"])
def test_a_device_name_with_parentheses_or_brackets_is_primed_from_its_files(name, tmp_path, dev):
    """Device names go into file names as SGLang writes them (torch's name, spaces as '_'), parentheses and brackets
    kept: the export of such a device is found, not read as a pattern ('[rev_2]' is a glob character class)."""
    import dataclasses

    spec = load("AXPY")
    named = dataclasses.replace(dev, name=name)
    cfg = spec.configs({"N": 64}, "fp32", dev)[-1]
    write_export(tmp_path, spec, {}, "fp32", named, {64: cfg})
    report = flytune_nb.prime(spec, tmp_path, device=named)
    assert [k.config for k in report.keys] == [cfg] and [p.name for p in report.files] == [
        f"device_name={name},dtype=fp32.json"]


def test_a_stale_or_unservable_file_is_reported_and_start_up_goes_on(tmp_path, dev):
    # tuned for an older source of the kernel
    spec, cfg, folder = axpy_export_with_provenance(tmp_path, dev, source="0123456789abcdef")
    with pytest.warns(ArtifactWarning, match="1 file.s. tuned for another source of the kernel, primed"):
        report = flytune_nb.prime(spec, tmp_path)
    assert [k.config for k in report.keys] == [cfg] and len(report.stale) == 1 and "stale:" in report.summary()
    # a knob renamed since the export: that file is left out, named, and start-up goes on
    name = next(folder.glob("*device_name=*.json"))
    name.write_text(name.read_text().replace('"BLOCK"', '"BLOCK_SIZE"'))
    spec.extra["adopted"].autotuner.cache.clear()
    with pytest.warns(ArtifactWarning, match=r"unknown knob \['BLOCK_SIZE'\].*nothing primed"):
        report = flytune_nb.prime(spec, tmp_path)
    assert report.keys == [] and report.skipped and "NOT primed: " + name.name in report.summary()


def test_a_file_whose_provenance_contradicts_its_name_is_left_out_not_primed_for_the_provenance(tmp_path, dev):
    """The name is what lookup serves a file for (fp32 here); a sidecar saying bf16 (copied from another folder)
    would prime bf16 keys no engine asks this file about: the file is named, left out, and start-up goes on."""
    spec, _, folder = axpy_export_with_provenance(tmp_path, dev, dtype="bf16")
    with pytest.warns(ArtifactWarning, match="says it was tuned for dtype bf16, which its name does not say"):
        report = flytune_nb.prime(spec, tmp_path)
    assert report.keys == [] and [p.name for p, _ in report.skipped] == [next(folder.glob("*device_name=*")).name]


def test_a_stray_file_or_a_broken_shape_in_provenance_is_left_out_and_the_rest_primed(tmp_path, dev):
    spec, cfg, folder = axpy_export_with_provenance(tmp_path, dev)
    good = next(folder.glob("*device_name=*.json"))
    stray = folder / f"copy of,{good.name}"  # matched by the device's glob, not an artifact name
    stray.write_text(good.read_text())
    with pytest.warns(ArtifactWarning, match="not an artifact name"):
        report = flytune_nb.prime(spec, tmp_path)
    assert [k.config for k in report.keys] == [cfg] and [p.name for p, _ in report.skipped] == [stray.name]
    stray.unlink()
    spec, _, folder = axpy_export_with_provenance(tmp_path / "b", dev, shape={"N": "sixty-four"})
    with pytest.warns(ArtifactWarning, match="holds a value that is not a whole number"):
        report = flytune_nb.prime(spec, tmp_path / "b")
    assert report.keys == [] and len(report.skipped) == 1


def test_another_kernels_suffixed_file_in_the_folder_is_not_primed_nor_reported(tmp_path, dev):
    """A folder two kernels share holds the other's ``…,dtype=fp32_down.json``, which its provenance says is that
    kernel's: neither this kernel's to prime nor a file to report as unusable."""
    spec, cfg, folder = axpy_export_with_provenance(tmp_path, dev)
    good = next(folder.glob("*device_name=*.json"))
    other = folder / good.name.replace(".json", "_down.json")
    other.write_text('{"1": {"BLOCK": 0}}')
    sidecar = json.loads((folder / PROVENANCE).read_text())
    (folder / PROVENANCE).write_text(json.dumps({**sidecar, other.name: {"1": {"kernel": "another_kernel_down"}}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = flytune_nb.prime(spec, tmp_path)
    assert [k.config for k in report.keys] == [cfg] and report.skipped == []
    assert [p.name for p in report.files] == [good.name]


def test_a_coarse_key_serves_the_winner_of_the_largest_share_of_time(tmp_path, dev):
    spec = load("SCALE")  # keyed on NB = cdiv(M*N, 1024): M=1, 2, 4 at N=64 share one key
    space = spec.configs({"M": 1, "N": 64}, "fp32", dev)
    a, b = space[0], space[1]
    write_export(tmp_path, spec, {"N": 64}, "fp32", dev, {1: a, 2: a, 4: b}, p50={1: 0.001, 2: 0.001, 4: 0.005})
    with pytest.warns(CoarseKeyWarning, match="share one autotuner key and their winners differ"):
        report = flytune_nb.prime(spec, tmp_path)
    (pk,) = report.keys
    assert pk.config == b and not pk.agreed and len(pk.shapes) == 3 and report.coarse == [pk]
    assert pk.winners == {str(a): [{"M": 1, "N": 64}, {"M": 2, "N": 64}], str(b): [{"M": 4, "N": 64}]}
    # without latencies each shape is one vote
    spec.extra["adopted"].autotuner.cache.clear()
    write_export(tmp_path / "votes", spec, {"N": 64}, "fp32", dev, {1: a, 2: a, 4: b})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CoarseKeyWarning)
        assert flytune_nb.prime(spec, tmp_path / "votes").keys[0].config == a
    x = torch.randn(4, 64)
    y = torch.full_like(x, float("nan"))
    at = spec.extra["adopted"].autotuner
    with tc.count_benchmarks(at, wall_clock) as count:
        spec.extra["adopted"].kernel[lambda m: (triton.cdiv(256, m["BLOCK"]),)](x, y, 256, 1)
    assert count.calls == 0 and torch.equal(y, 2 * x)


def test_a_key_the_installed_triton_builds_otherwise_is_reported_not_primed(tmp_path, dev, monkeypatch):
    spec = load("AXPY")
    write_export(tmp_path, spec, {}, "fp32", dev, {64: spec.configs({"N": 64}, "fp32", dev)[0]})
    real = tc.autotune_key
    monkeypatch.setattr(tc, "autotune_key", lambda at, a, k: real(at, a, k) + ("drift",))
    report = flytune_nb.prime(spec, tmp_path)
    assert report.keys == [] and report.mismatched == [({"N": 64}, "fp32", (64, "torch.float32", "torch.float32",
                                                                             "drift"))]
    assert not spec.extra["adopted"].autotuner.cache and "NOT primed" in report.summary()


def test_the_disk_cache_is_left_alone_where_triton_cannot_read_it(tmp_path, dev):
    spec = load("AXPY")
    write_export(tmp_path, spec, {}, "fp32", dev, {64: spec.configs({"N": 64}, "fp32", dev)[0]})
    assert flytune_nb.prime(spec, tmp_path).disk == ""  # "auto": this kernel does not read it
    forced = flytune_nb.prime(spec, tmp_path, disk=True)
    if dev.backend == "interpreter":
        assert forced.disk == "not written: the kernel is not compiled (Triton's interpreter)"


def test_a_single_config_decorator_has_nothing_to_prime(tmp_path, dev):
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def one(x, n, BLOCK: tl.constexpr):
        pass

    spec = flytune_nb.adopt(one, axes=("N",), dtypes=("fp32",), name="single_config",
                            make_inputs=lambda s, d, dev: {"x": torch.randn(s["N"], device=dev.torch_device)},
                            launch=lambda k, i: k[(1,)](i["x"], i["x"].numel()),
                            reference=lambda i: {"x": i["x"].double()})
    assert "single config" in flytune_nb.prime(spec, tmp_path).note


DISK_KERNEL = '''
import triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (128, 256, 512) for w in (2, 4)],
                 key=["n"], cache_results=True)
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)
'''

DISK_ADOPT = '''
import torch, triton, flytune_nb
from disk_kernel import double
SPEC = flytune_nb.adopt(double, axes=("N",), dtypes=("fp32",),
    make_inputs=lambda s, d, dev: {"x": torch.randn(s["N"], device=dev.torch_device),
                                   "y": torch.empty(s["N"], device=dev.torch_device)},
    launch=lambda k, i: k[lambda m: (triton.cdiv(i["x"].numel(), m["BLOCK"]),)](i["x"], i["y"], i["x"].numel()),
    reference=lambda i: {"y": 2 * i["x"].double()})
'''

# A process that never imports flytune_nb: its autotuner reads Triton's disk cache and benchmarks nothing.
DISK_READER = '''
import json, torch, triton
from disk_kernel import double
calls = []
bench = double.do_bench
double.do_bench = lambda fn, quantiles=None, **kw: calls.append(1) or bench(fn, quantiles=quantiles, **kw)
x = torch.randn(8192, device="cuda"); y = torch.empty_like(x)
double[lambda m: (triton.cdiv(8192, m["BLOCK"]),)](x, y, 8192)
torch.cuda.synchronize()
print(json.dumps({"calls": len(calls), "best": str(double.best_config), "ok": bool(torch.equal(y, 2 * x))}))
'''


@pytest.mark.gpu
def test_a_process_that_never_imports_flytune_reads_the_primed_entry_from_tritons_disk_cache(tmp_path, dev):
    (tmp_path / "disk_kernel.py").write_text(DISK_KERNEL)
    (tmp_path / "disk_adopt.py").write_text(DISK_ADOPT)
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton_cache"), "PYTHONPATH": f"{tmp_path}:" +
           os.environ.get("PYTHONPATH", "")}
    sys.path.insert(0, str(tmp_path))
    os.environ["TRITON_CACHE_DIR"] = env["TRITON_CACHE_DIR"]
    try:
        spec = get_kernel(f"{tmp_path / 'disk_adopt.py'}:SPEC")
        winner = Config({"BLOCK": 256}, num_warps=2, num_stages=3)  # not what the first config would give
        write_export(tmp_path / "exports", spec, {}, "fp32", dev, {8192: winner}, p50={8192: 0.004})
        report = flytune_nb.prime(spec, tmp_path / "exports")
        assert report.keys[0].disk and report.disk == "", report.summary()
    finally:
        sys.path.remove(str(tmp_path))
        del os.environ["TRITON_CACHE_DIR"]
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(DISK_READER)], env=env, capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"calls": 0, "best": "BLOCK: 256, num_warps: 2, num_ctas: 1, num_stages: 3, maxnreg: None",
                   "ok": True}, out.stderr[-2000:]


def test_lookup_says_what_a_primed_process_launches_where_that_is_not_the_nearest_entry(tmp_path, dev, capsys):
    from flytune_nb.ui.cli import main

    spec = load("AXPY")
    space = spec.configs({"N": 64}, "fp32", dev)
    write_export(tmp_path / "one", spec, {}, "fp32", dev, {64: space[1]})
    ask = ["lookup", f"{ADOPTED}:AXPY", "--dtype", "fp32", "--dir", str(tmp_path / "one")]
    assert main(ask + ["N=64"]) == 0
    out = capsys.readouterr().out
    assert f"{space[1]}  (source: artifact" in out and "note" not in out
    # lookup answers N=50 with the nearest entry, but prime filled only N=64's key: the decorator tunes N=50
    assert main(ask + ["N=50"]) == 0
    out = capsys.readouterr().out
    assert f"{space[1]}  (source: artifact" in out
    assert "has no entry for this call's autotuner key (50, 'torch.float32', 'torch.float32')" in out

    spec = load("SCALE")  # keyed on NB = cdiv(M*N, 1024): M=1, 2, 4 at N=64 share one key
    space = spec.configs({"M": 1, "N": 64}, "fp32", dev)
    a, b = space[0], space[1]
    write_export(tmp_path / "coarse", spec, {"N": 64}, "fp32", dev, {1: a, 2: a, 4: b},
                 p50={1: 0.001, 2: 0.001, 4: 0.005})
    ask = ["lookup", f"{ADOPTED}:SCALE", "--dtype", "fp32", "--dir", str(tmp_path / "coarse")]
    assert main(ask + ["M=1", "N=64"]) == 0
    out = capsys.readouterr().out
    assert f"{a}  (source: artifact" in out
    assert f"launches {b} for this call: its autotuner key" in out and "M=4 N=64" in out
    assert main(ask + ["M=4", "N=64"]) == 0
    assert "note" not in capsys.readouterr().out
