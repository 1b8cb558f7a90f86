"""flytune_nb.adopt: a KernelSpec read from an existing @triton.autotune decorator, swept like a folder kernel (worker
processes load it by its module attribute), with one clear error for each input it cannot use."""
import json
import math
import os
import re
import textwrap

import pytest
import torch
import triton

from flytune_nb import Sweep, adopt
from flytune_nb.core.config import Config
from flytune_nb.core.registry import KernelNotFound, RegistryError, get_kernel, list_kernels, load_name
from flytune_nb.errors import UsageError
from flytune_nb.kit.adopt import AdoptError, _Knobs
from flytune_nb.measure.trial import evaluate

HERE = os.path.dirname(os.path.abspath(__file__))
REF = f"{HERE}/adopted.py"


def load(attr):
    return get_kernel(f"{REF}:{attr}")


def test_the_decorator_gives_the_space_the_key_and_the_in_place_tensors(dev):
    spec = load("AXPY")
    ad = spec.extra["adopted"]
    assert spec.name == "axpy_acc" and spec.mutates == ("acc",) and spec.outputs == () and spec.zeroes == ()
    # prune_configs_by keeps BLOCK <= 64: 4 of the decorator's 6 configs, in its order, stages as it wrote them
    assert [str(c) for c in spec.configs({"N": 100}, "fp32", dev)] == [
        "BLOCK=16,num_stages=1,num_warps=1", "BLOCK=16,num_stages=3,num_warps=4",
        "BLOCK=32,num_stages=1,num_warps=1", "BLOCK=32,num_stages=3,num_warps=4"]
    assert spec.default({"N": 100}, "fp32", dev) == Config({"BLOCK": 16}, num_warps=1, num_stages=1)
    # the key the autotuner builds: n, then each tensor's dtype (the heuristic's EVEN is no argument of the key)
    assert ad.key(spec.make_inputs({"N": 96}, "fp16", dev)) == (96, "torch.float16", "torch.float16")
    assert load("TOTAL").zeroes == ("out",) and load("SCALE").outputs == ("y",)
    assert "key ['n'], 6 configs; pruned per shape" in spec.description and "in place: acc" in spec.description


def test_an_isolated_sweep_loads_the_adopted_kernel_by_name_and_checks_every_config(tmp_path):
    spec = load("SCALE")
    assert load_name(spec) == f"{REF}:SCALE"
    results = Sweep(spec, "M=4 N=40,64", ["fp32"], db=tmp_path / "r.db").run()  # isolate=True: worker processes
    for r in results:
        # SKIP=1 leaves the last block NaN (poisoned): wrong, never the best; SKIP=0 is right
        statuses = sorted((t.config["SKIP"], t.status) for t in r.trials)
        assert statuses == [(0, "ok")] * 4 + [(1, "wrong")] * 4
        assert r.best.config["SKIP"] == 0 and r.best.ok


def test_in_place_kernels_stay_correct_across_timed_reps(dev, cpu_timer):
    spec = load("AXPY")
    t = evaluate(spec, {"N": 100}, "fp32", spec.default({"N": 100}, "fp32", dev), dev, cpu_timer)
    assert t.ok and t.rel_error < 1e-6  # restore_value -> mutates: acc restored before every rep
    total = load("TOTAL")
    trials = [evaluate(total, {"N": 100}, "fp32", c, dev, cpu_timer) for c in total.configs({"N": 100}, "fp32", dev)]
    assert [t.status for t in trials] == ["ok", "ok"] and max(t.rel_error for t in trials) < 1e-6


def test_an_accumulator_is_zeroed_before_the_checked_launch_too(dev, cpu_timer):
    """make_inputs draws random data for every tensor, accumulators included: the checked launch, like every rep and
    every real call, adds onto zeros, so a correct atomic-add kernel passes whichever convention its reference uses."""
    from tests.kit import adopted

    def random_out(shape, dtype, device):
        inputs = adopted.total_inputs(shape, dtype, device)
        inputs["out"].uniform_(5.0, 10.0)  # stale data the kernel must not add onto
        return inputs

    references = {"sum": lambda i: {"out": i["x"].double().sum().reshape(1)},
                  # written against the tensors as they come: the accumulator's value plus the sum
                  "onto": lambda i: {"out": i["out"].double() + i["x"].double().sum()}}
    for label, reference in references.items():
        spec = adopt(adopted.total_kernel, name=f"total_{label}", axes=("N",), dtypes=("fp32",),
                     make_inputs=random_out, launch=adopted.total_launch, reference=reference,
                     example_shape={"N": 100})
        trials = [evaluate(spec, {"N": 100}, "fp32", c, dev, cpu_timer) for c in spec.configs({"N": 100}, "fp32", dev)]
        assert [t.status for t in trials] == ["ok", "ok"], (label, [t.reason for t in trials])
        assert max(t.rel_error for t in trials) < 1e-6


def test_a_census_of_an_adopted_kernel_reads_each_configs_binary(tmp_path, capsys, monkeypatch):
    """An adopted kernel compiles through its autotuner, not flytune's launcher: the census must still get the
    binary Triton built for gfx942, or every row reads "compiled" with no registers, loads or binary at all. No
    --dtype: the kernel's own (fp32 here; bf16, which it lacks, would be an error)."""
    import csv

    from flytune_nb.ui.cli import main
    from tests.conftest import CENSUS_CACHE

    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", os.environ.get("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE)))
    out = tmp_path / "census.csv"
    assert main(["census", "total_adopted", "--path", f"{REF}:TOTAL", "--target", "mi300x",
                 "--db", str(tmp_path / "c.db"), "--csv", str(out), "--quiet", "-j", "1"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert {r["dtype"] for r in rows} == {"fp32"} and get_kernel("rmsnorm").default_dtype == "bf16"
    assert sorted(json.loads(r["config"])["BLOCK"] for r in rows) == [16, 32]
    assert all(r["status"] == "ok" and int(r["registers"]) > 0 and r["binary"] for r in rows), rows
    assert len({r["binary"] for r in rows}) == 2  # BLOCK is in the code: two binaries
    assert int(rows[0]["widest_load"]) == 4  # one fp32 a lane: num_warps=1 x 64 lanes covers a 16- or 32-block
    assert re.search(r"registers \d+-\d+ per thread", capsys.readouterr().out)


def test_a_space_too_large_to_time_goes_to_a_search_strategy(tmp_path):
    results = Sweep(load("SCALE"), "M=2 N=64", ["fp32"], db=tmp_path / "r.db", strategy="random", budget=3,
                    isolate=False).run()
    assert 1 <= len(results[0].trials) <= 4  # the default plus at most the budget, of 8 configs


def test_a_key_coarser_than_the_axes_is_said(dev):
    spec = load("SCALE")  # keyed on NB = cdiv(M*N, 1024), not on M or N
    assert spec.extra["coarse_axes"] == ("M", "N")
    assert "its key does not change with M, N" in spec.description
    assert load("AXPY").extra["coarse_axes"] == ()


def test_the_registry_knows_adopted_kernels_by_reference_and_by_name(tmp_path, capsys):
    from flytune_nb.ui.cli import main

    spec = load("AXPY")
    assert get_kernel("axpy_acc") is spec  # known by name once loaded
    assert "axpy_acc" in list_kernels([f"{REF}:AXPY"])
    assert main(["kernels", "--path", f"{REF}:TOTAL"]) == 0
    assert "total_adopted" in capsys.readouterr().out
    with pytest.raises(RegistryError, match="is a Heuristics, not a KernelSpec"):
        get_kernel(f"{REF}:axpy_acc")
    with pytest.raises(RegistryError, match="no module 'not_installed_here'"):
        get_kernel("not_installed_here.kernels:SPEC")
    with pytest.raises(KernelNotFound, match="module attribute"):
        get_kernel("no_such_kernel_anywhere")


def test_a_misspelt_attribute_names_the_file_and_the_specs_it_holds():
    """`file.py:AXPX` for AXPY: the file has no such name, which is a typo to correct, not a spec to assign; the
    message names the file the user gave (not the module name it is imported under) and the specs there."""
    with pytest.raises(RegistryError) as e:
        get_kernel(f"{REF}:AXPX")
    assert str(e.value) == (f"{REF}:AXPX: {REF} has no AXPX (did you mean AXPY?); its KernelSpecs: AXPY, SCALE, "
                            f"TOTAL"), str(e.value)


def test_a_spec_made_in_main_runs_in_process_only(dev, tmp_path):
    base = load("AXPY")
    ad = base.extra["adopted"]
    spec = adopt(ad.kernel, axes=("N",), dtypes=("fp32",), make_inputs=ad.make_inputs, launch=ad.launch,
                 reference=ad.reference, name="axpy_here")
    spec.extra["module"] = "__main__"  # as in a notebook cell
    with pytest.raises(UsageError, match="made in __main__ where another process cannot import it"):
        Sweep(spec, "N=64", ["fp32"])
    r = Sweep(spec, "N=64", ["fp32"], isolate=False, db=tmp_path / "r.db").run()[0]
    assert r.best.ok and all(t.ok for t in r.trials)


def test_knobs_that_are_not_integers_round_trip():
    hook = lambda nargs: None  # noqa: E731
    configs = [triton.Config({"BLOCK": b, "EVEN": e, "ACT": a, "MODE": "fast"}, num_warps=4, num_stages=2,
                             num_ctas=c, maxnreg=r) for b, e, a, c, r in
               ((64, True, "silu", 1, None), (128, False, "gelu", 2, 128))]
    configs.append(triton.Config({"BLOCK": 32, "EVEN": True, "ACT": "gelu", "MODE": "fast"}, pre_hook=hook))
    knobs = _Knobs(configs, "k")
    ours = [knobs.ours(c) for c in configs]
    # bool -> 0/1; a varying string -> the index of its value; a constant string is no knob; num_ctas=1 left out
    assert ours[0].to_dict() == {"ACT": 0, "BLOCK": 64, "EVEN": 1, "num_stages": 2, "num_warps": 4}
    assert ours[1].to_dict() == {"ACT": 1, "BLOCK": 128, "EVEN": 0, "maxnreg": 128, "num_ctas": 2, "num_stages": 2,
                                 "num_warps": 4}
    back = knobs.theirs(ours[1])
    assert back.kwargs == {"BLOCK": 128, "EVEN": False, "ACT": "gelu", "MODE": "fast"}
    assert type(back.kwargs["EVEN"]) is bool
    assert (back.num_ctas, back.maxnreg, back.num_stages) == (2, 128, 2)
    with pytest.raises(AdoptError, match="ACT='relu', a value none of the decorator's configs has"):
        knobs.ours(triton.Config({"BLOCK": 64, "EVEN": True, "ACT": "relu", "MODE": "fast"}))


def test_a_config_pre_hook_runs_before_its_launch(dev):
    base = load("SCALE")
    ad = base.extra["adopted"]
    at = ad.autotuner
    seen = []
    hooked = triton.Config({"BLOCK": 32, "SKIP": False}, num_warps=1, pre_hook=lambda nargs: seen.append(
        (nargs["BLOCK"], nargs["n"], nargs["num_warps"])))
    saved = list(at.configs)
    at.configs[:] = [hooked] + saved[1:]
    try:
        spec = adopt(ad.kernel, axes=("M", "N"), dtypes=("fp32",), make_inputs=ad.make_inputs, launch=ad.launch,
                     reference=ad.reference, name="scale_hooked")
        config = spec.configs({"M": 2, "N": 32}, "fp32", dev)[0]
        assert spec.extra["adopted"].to_triton(config) is hooked  # the decorator's own object, hook and all
        inputs = spec.make_inputs({"M": 2, "N": 32}, "fp32", dev)
        (y,) = spec.run(inputs, config)
        assert seen == [(32, 64, 1)] and torch.equal(y, 2 * inputs["x"])
        twin = triton.Config({"BLOCK": 32, "SKIP": False}, num_warps=1, pre_hook=lambda nargs: None)
        at.configs[:] = [hooked, twin]
        with pytest.raises(AdoptError, match="differ only in their pre_hook"):
            adopt(ad.kernel, axes=("M", "N"), make_inputs=ad.make_inputs, launch=ad.launch,
                  reference=ad.reference, name="scale_twins")
    finally:
        at.configs[:] = saved


# -- bad input: one clear message, nothing written -------------------------------------------------------------------
def _adopt(attr, **changes):
    ad = load(attr).extra["adopted"]
    kw = dict(axes=("N",) if attr != "SCALE" else ("M", "N"), dtypes=("fp32",), make_inputs=ad.make_inputs,
              launch=ad.launch, reference=ad.reference, name="bad_one")
    return adopt(changes.pop("kernel", ad.kernel), **{**kw, **changes})


def test_a_decorator_that_cannot_be_read(monkeypatch):
    from flytune_nb._compat import triton as tc

    with pytest.raises(AdoptError, match="is a jit function without @triton.autotune"):
        _adopt("AXPY", kernel=load("AXPY").extra["adopted"].jit)
    with pytest.raises(AdoptError, match="is a dict, not a @triton.autotune kernel"):
        _adopt("AXPY", kernel={})
    monkeypatch.setattr(tc, "AUTOTUNER_FIELDS", tc.AUTOTUNER_FIELDS + ("cache_layout_of_the_future",))
    with pytest.raises(AdoptError, match=r"Autotuner has no cache_layout_of_the_future: flytune_nb reads the "
                                         r"decorator of Triton 3\.2, 3\.3"):
        _adopt("AXPY")
    with pytest.raises(AdoptError, match="'package.module:attribute'"):
        adopt("no_colon_here", axes=("N",), make_inputs=None, launch=None, reference=None)


def test_a_launch_that_does_not_call_the_kernel():
    with pytest.raises(AdoptError, match=r"axpy_acc: launch\(kernel, inputs\) never called axpy_acc"):
        _adopt("AXPY", launch=lambda kernel, inputs: None)
    with pytest.raises(AdoptError, match=r"launch\(kernel, inputs\) raised KeyError: 'nope'"):
        _adopt("AXPY", launch=lambda kernel, inputs: inputs["nope"])


def test_a_reference_with_other_output_shapes():
    with pytest.raises(AdoptError, match=r"reference's 'acc' has shape \(4096, 2\), but the kernel writes "
                                         r"inputs\['acc'\] of shape \(4096,\)"):
        _adopt("AXPY", reference=lambda i: {"acc": torch.zeros(i["acc"].shape[0], 2, device=i["acc"].device)})
    with pytest.raises(AdoptError, match="reference returns 'out', which is not a tensor of the inputs"):
        _adopt("AXPY", reference=lambda i: {"out": i["acc"]})
    with pytest.raises(AdoptError, match=r"must return \{input name: expected tensor\}"):
        _adopt("AXPY", reference=lambda i: i["acc"])


def test_a_key_argument_missing_from_the_call():
    def launch(kernel, inputs):  # NB, the key, left out: the autotuner would key every call alike
        n = inputs["x"].numel()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](inputs["x"], inputs["y"], n)

    with pytest.raises(AdoptError, match=r"key argument NB of @triton.autotune\(key=\['NB'\]\) not passed by "
                                         r"launch; the autotuner would leave it out of its key"):
        _adopt("SCALE", launch=launch)



def test_a_decorator_naming_an_argument_the_kernel_lacks():
    """The launch passes every argument the kernel has; what is wrong is the decorator's name. Triton drops an
    unknown key name silently (every size then shares one config), so the message points at the decorator."""
    jit = load("AXPY").extra["adopted"].jit  # axpy_acc(x, acc, n, alpha, BLOCK, EVEN)
    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
    at = triton.autotune(configs=configs, key=["nn"], restore_value=["acc"])(jit)
    with pytest.raises(AdoptError, match=r"@triton.autotune\(key=\['nn'\]\) names 'nn' \(did you mean 'n'\?\), "
                                         r"which is not an argument of axpy_acc \(x, acc, n, alpha, BLOCK, EVEN\); "
                                         r"Triton leaves such a name out of its key") as e:
        _adopt("AXPY", kernel=at)
    assert "launch" not in str(e.value)
    at = triton.autotune(configs=configs, key=["n"], restore_value=["accum"])(jit)
    with pytest.raises(AdoptError, match=r"restore_value=\['accum'\]\) names 'accum' \(did you mean 'acc'\?\)"):
        _adopt("AXPY", kernel=at)
    at = triton.autotune(configs=configs, key=["n"], reset_to_zero=["out", "tmp"])(jit)
    with pytest.raises(AdoptError, match=r"names 'out', 'tmp', which are not arguments of axpy_acc"):
        _adopt("AXPY", kernel=at)


def test_a_config_knob_the_kernel_lacks_is_refused_at_adoption(dev):
    """A config that sets a name the kernel has no argument for: Triton refuses every launch of it on a GPU (a
    KeyError while benchmarking) and its interpreter drops the name without a word, so a CPU sweep would pass and
    export a knob the kernel never reads. It is one AdoptError naming the config, the knob and the closest
    argument; a launch option Triton accepts in a config (enable_fp_fusion) is not a knob of the kernel and stays
    accepted."""
    import random

    jit = load("AXPY").extra["adopted"].jit  # axpy_acc(x, acc, n, alpha, BLOCK, EVEN)
    blocks = random.sample((16, 32, 64, 128), 2)
    typo = random.choice(("BLOCKK", "BLOK", "BLOCK_"))
    configs = [triton.Config({"BLOCK": blocks[0]}), triton.Config({"BLOCK": blocks[1], typo: 4})]
    at = triton.autotune(configs=configs, key=["n"], restore_value=["acc"])(jit)
    with pytest.raises(AdoptError, match=rf"config .*{typo}: 4.* sets {typo!r} \(did you mean 'BLOCK'\?\), which is "
                                         r"not an argument of axpy_acc \(x, acc, n, alpha, BLOCK, EVEN\)"):
        _adopt("AXPY", kernel=at)
    configs = [triton.Config({"BLOCK": b, "enable_fp_fusion": f}) for b in blocks for f in (False, True)]
    at = triton.autotune(configs=configs, key=["n"], restore_value=["acc"])(jit)
    spec = _adopt("AXPY", kernel=at)
    assert {c.to_dict()["enable_fp_fusion"] for c in spec.configs({"N": 64}, "fp32", dev)} == {0, 1}


def test_a_shape_of_that_does_not_give_the_shape_back_is_refused(dev):
    """tuned() looks a call's config up by shape_of: one that reads M off the columns would serve, without a word,
    the entry of another shape. The probe shape's axes are made to differ, so a swap shows even where they are
    equal."""
    swapped = lambda i: {"M": i["x"].shape[1], "N": i["x"].shape[0]}  # noqa: E731
    with pytest.raises(AdoptError, match=r"shape_of\(make_inputs\(\{'M': 4, 'N': 64\}\)\) returned "
                                         r"\{'M': 64, 'N': 4\}; it must give the shape back"):
        _adopt("SCALE", shape_of=swapped, example_shape={"M": 4, "N": 64})
    with pytest.raises(AdoptError, match=r"shape_of\(make_inputs\(\{'M': 64, 'N': 128\}\)\) returned "
                                         r"\{'M': 128, 'N': 64\}"):
        _adopt("SCALE", shape_of=swapped, example_shape={"M": 64, "N": 64})
    with pytest.raises(AdoptError, match=r"returned \{'M': 4\}"):  # an axis left out
        _adopt("SCALE", shape_of=lambda i: {"M": i["x"].shape[0]}, example_shape={"M": 4, "N": 64})
    # a value that is a tensor, not a number: tuned() refuses it too; here it is one AdoptError, not the meta
    # device's RuntimeError
    with pytest.raises(AdoptError, match=r"shape_of\(make_inputs\(\{'M': 4, 'N': 64\}\)\) returned .*tensor"):
        _adopt("SCALE", shape_of=lambda i: {"M": i["x"].shape[0], "N": i["x"].new_tensor(i["x"].shape[1])},
               example_shape={"M": 4, "N": 64})
    spec = _adopt("SCALE", shape_of=lambda i: {"M": i["x"].shape[0], "N": i["x"].shape[1]},
                  example_shape={"M": 64, "N": 64})
    x = torch.randn(3, 40, device=dev.torch_device)
    assert spec.shape_of({"x": x, "y": torch.empty_like(x)}) == {"M": 3, "N": 40}

def test_in_place_tensors_must_be_inputs():
    def launch(kernel, inputs):  # acc handed over as a copy: restore_value could not be honoured
        n = inputs["x"].numel()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](inputs["x"], inputs["acc"].clone(), n, 2.0)

    with pytest.raises(AdoptError, match="restore_value names 'acc', but launch passes it a tensor that is not one "
                                         "of the inputs"):
        _adopt("AXPY", launch=launch)


def test_an_autotuner_hook_is_refused():
    at = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"],
                         pre_hook=lambda nargs, reset_only=False: None)(load("AXPY").extra["adopted"].jit)
    with pytest.raises(AdoptError, match=r"autotune\(pre_hook=..., post_hook=...\) replaces restore_value"):
        _adopt("AXPY", kernel=at)


@pytest.mark.parametrize("changes, says", [
    (dict(axes="MN"), r"axes must be a tuple of names, e\.g\. axes=\('M', 'N'\); got 'MN'"),
    (dict(default="BLOCK=16"), "default must be a Config or a function"),
    (dict(launch=None), "launch must be a function"),
    (dict(name=5), "name must be letters, digits and '_', got 5"),
    (dict(name="rmsnorm"), "the name 'rmsnorm' is taken by the kernel folder .*rmsnorm; pass another name="),
])
def test_arguments_of_the_wrong_kind_are_refused_at_adoption(changes, says):
    with pytest.raises(AdoptError, match=says):
        _adopt("SCALE", **changes)


def test_dtypes_may_be_text():
    assert _adopt("SCALE", dtypes="fp32").dtypes == ("fp32",)  # one name, not the characters 'f', 'p', '3', '2'


def test_bad_adoption_from_the_command_line_writes_nothing(tmp_path, capsys):
    from flytune_nb.ui.cli import main

    bad = tmp_path / "bad_adopt.py"
    bad.write_text(open(REF).read().replace("reference=lambda i: {\"y\": 2 * i[\"x\"].double()}",
                                            "reference=lambda i: {\"y\": i[\"x\"][:1]}"))
    db = tmp_path / "never.db"
    assert main(["sweep", f"{bad}:SCALE", "--grid", "M=2 N=64", "--dtype", "fp32", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reference's 'y' has shape (1, 64), but the kernel writes" in err
    assert "Traceback" not in err and not db.exists()


def test_exports_and_the_regression_gate_work_on_an_adopted_kernel(tmp_path, capsys, dev):
    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store
    from flytune_nb.ui.cli import main

    store = Store(tmp_path / "r.db")
    Sweep(load("AXPY"), "N=64,100", ["fp32"], db=store, isolate=False).run()
    files = export(store, tmp_path / "exports")
    assert [f.name for f in files] == [f"device_name={dev.name},dtype=fp32.json"]
    table = {int(k): v for k, v in __import__("json").loads(files[0].read_text()).items()}
    assert sorted(table) == [64, 100] and all(set(c) == {"BLOCK", "num_stages", "num_warps"} for c in table.values())
    # interpreter timings are noise, a GPU's are microseconds: the floor keeps the gate to correctness here
    assert main(["check", str(tmp_path / "exports"), "--path", f"{REF}:AXPY", "--min-delta-us", "1e9"]) == 0
    out = capsys.readouterr().out
    assert "axpy_acc" in out and f"2 configs checked on {dev.name}: 0 FAIL" in out
    assert not math.isnan(store.frame("axpy_acc")["p50"].iloc[0])


def test_a_path_that_cannot_be_loaded_is_one_usage_error_for_every_command(tmp_path, capsys, dev):
    """A typo in --path is bad input: `flytune check` says so in one line (exit 2) instead of failing each file with
    a cut-off registry message and "export it again" (the exports are fine), and every other command that takes
    --path refuses it before it runs, even where the kernel it names is built in and does not need it."""
    import random

    from flytune_nb.artifacts.export import export
    from flytune_nb.engine.store import Store
    from flytune_nb.ui.cli import main

    n = random.choice((48, 64, 80))
    store = Store(tmp_path / "r.db")
    Sweep(load("AXPY"), f"N={n}", ["fp32"], db=store, isolate=False, baselines=(),
          configs=[Config({"BLOCK": 16}, num_warps=1, num_stages=1)], selection=None).run()
    out = tmp_path / "exports"
    export(store, out)
    capsys.readouterr()
    bad_file = f"{tmp_path / 'adoptd.py'}:AXPY"  # no such file
    bad_attr = f"{REF}:AXPYY"  # no such attribute
    bad_dir = str(tmp_path / "no_such_folder")
    for bad in (bad_file, bad_attr, bad_dir):
        for argv in (["check", str(out), "--path", bad, "--quiet", "--min-delta-us", "1e9"],
                     ["check", str(out), "--path", f"{REF}:AXPY", "--path", bad, "--quiet"],
                     ["lookup", "rmsnorm", "M=3", "N=256", "--dtype", "fp32", "--path", bad],
                     ["sweep", "rmsnorm", "--grid", f"M=1 N={n}", "--dtype", "fp32", "--db",
                      str(tmp_path / "new.db"), "--quiet", "--path", bad],
                     ["export", "--db", str(tmp_path / "r.db"), "--out", str(tmp_path / "other"), "--path", bad],
                     ["census", "rmsnorm", "--grid", f"M=1 N={n}", "--path", bad],
                     ["kernels", "--path", bad]):
            assert main(argv) == 2, (argv, capsys.readouterr())
            got = capsys.readouterr()
            assert got.err.startswith("flytune: error: ") and got.err.count("\n") == 1, got
            assert "export it again" not in got.out + got.err and "Traceback" not in got.err
            assert (bad.split(":")[0] if bad != bad_attr else "AXPYY") in got.err
    assert not (tmp_path / "new.db").exists() and not (tmp_path / "other").exists()  # refused before anything ran
    assert main(["check", str(out), "--path", f"{REF}:AXPY", "--quiet", "--min-delta-us", "1e9"]) == 0


def test_an_importable_module_names_its_spec_by_module_and_attribute(tmp_path, monkeypatch):
    (tmp_path / "my_adopted_pkg.py").write_text(
        f"import importlib.util\n"
        f"_s = importlib.util.spec_from_file_location('adopted_src', {REF!r})\n"
        f"_m = importlib.util.module_from_spec(_s); _s.loader.exec_module(_m)\n"
        f"import flytune_nb\n"
        f"ad = _m.AXPY.extra['adopted']\n"
        f"SPEC = flytune_nb.adopt(ad.kernel, name='axpy_module', axes=('N',), dtypes=('fp32',),\n"
        f"                        make_inputs=lambda s, d, dev: ad.make_inputs(s, d, dev), launch=ad.launch,\n"
        f"                        reference=ad.reference)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_adopted_pkg

    assert load_name(my_adopted_pkg.SPEC) == "my_adopted_pkg:SPEC"  # found in the module that made it
    assert get_kernel("my_adopted_pkg:SPEC") is my_adopted_pkg.SPEC and get_kernel("axpy_module") is my_adopted_pkg.SPEC


def test_a_spec_whose_functions_come_from_a_shared_module_is_named_by_the_module_that_adopts_it(tmp_path, monkeypatch):
    """Several adoptions commonly share one make_inputs / launch / reference; the spec lives where SPEC = adopt(...) is
    written, and a Python sweep in worker processes must find it there."""
    (tmp_path / "adopt_from_shared.py").write_text(
        "import flytune_nb\n"
        "from tests.kit import adopted as shared\n"
        "SPEC = flytune_nb.adopt(shared.scale_kernel, name='scale_shared', axes=('M', 'N'), dtypes=('fp32',),\n"
        "                        make_inputs=shared.scale_inputs, launch=shared.scale_launch,\n"
        "                        reference=lambda i: {'y': 2 * i['x'].double()}, example_shape={'M': 4, 'N': 64})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import adopt_from_shared

    spec = adopt_from_shared.SPEC
    assert spec.make_inputs.__module__ == "tests.kit.adopted"  # the functions' module holds no such SPEC
    assert load_name(spec) == "adopt_from_shared:SPEC"
    assert get_kernel("adopt_from_shared:SPEC") is spec
    sweep = Sweep(spec, "M=2 N=64", ["fp32"], db=tmp_path / "r.db")  # isolated: workers load it by that name
    assert sweep.spec is spec and sweep._load_name == "adopt_from_shared:SPEC"


def test_lookup_for_a_named_gpu_of_a_kernel_whose_make_inputs_reads_values(tmp_path, capsys):
    """make_inputs that reads a tensor's value cannot build meta tensors: the autotuner's key and configs are read
    from inputs built on the CPU, also for a GPU this machine does not have; one that fails there too is one line."""
    from flytune_nb.ui.cli import main

    (tmp_path / "reads_values.py").write_text(textwrap.dedent('''
        import torch, triton, triton.language as tl
        import flytune_nb

        @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in (16, 32)], key=["n"])
        @triton.jit
        def twice(x, y, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

        def make_inputs(shape, dtype, device):
            n = int(torch.tensor([shape["N"]], device=device.torch_device).item())  # no meta tensors
            if n == 13:
                raise ValueError("13 is unlucky")
            return {"x": torch.randn(n, device=device.torch_device), "y": torch.empty(n, device=device.torch_device),
                    "n": n}

        def launch(kernel, inp):
            kernel[lambda meta: (triton.cdiv(inp["n"], meta["BLOCK"]),)](inp["x"], inp["y"], inp["n"])

        SPEC = flytune_nb.adopt(twice, make_inputs=make_inputs, launch=launch,
                                reference=lambda inp: {"y": inp["x"] * 2}, axes=("N",), dtypes=("fp32",))
        '''))
    ref = f"{tmp_path / 'reads_values.py'}:SPEC"
    assert main(["lookup", ref, "N=64", "--dtype", "fp32", "--device", "h200", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "BLOCK=16" in out and "(source: default, device: NVIDIA_H200)" in out
    assert "autotuner key (64, 'torch.float32', 'torch.float32')" in out
    assert main(["lookup", ref, "N=13", "--dtype", "fp32", "--device", "h200", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "make_inputs cannot build inputs for {'N': 13} fp32 on the meta device or the CPU" in err
    assert "ValueError: 13 is unlucky" in err and "Traceback" not in err


def test_a_misspelt_module_name_says_which_module_is_there(tmp_path, monkeypatch):
    """adopt("my_lbi:kernel") beside my_lib.py: the module is not missing from the machine, its name is misspelt.
    The message still says the name is not installed, and names the module that is there."""
    import random
    import string

    from flytune_nb.errors import KernelUnavailable

    lib = "lib_" + "".join(random.choices(string.ascii_lowercase, k=6))
    (tmp_path / f"{lib}.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    typo = lib[:-2] + lib[-1] + lib[-2]  # the last two letters swapped
    with pytest.raises(KernelUnavailable, match=rf"needs {typo!r}, which is not installed here \(did you mean "
                                                rf"{lib!r}\?\)"):
        adopt(f"{typo}:kernel", axes=("N",), make_inputs=None, launch=None, reference=None)
    with pytest.raises(KernelUnavailable, match=r"needs 'zz_qq_no_such_library', which is not installed here$"):
        adopt("zz_qq_no_such_library:kernel", axes=("N",), make_inputs=None, launch=None, reference=None)
