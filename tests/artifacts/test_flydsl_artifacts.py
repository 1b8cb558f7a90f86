"""FlyDSL offline configs written by flytune_nb.artifacts.flydsl, checked against FlyDSL 0.5.0 itself: the same bytes
as its own ``_emit_artifact``, served by its own ``resolve_config`` with zero benchmarks, and what it refuses refused
by our writer first. The GPU identity is faked the way FlyDSL's own unit tests fake it (``_device_descriptor``
patched in ``flydsl.autotune``); nothing launches."""
import ast
import dataclasses
import importlib
import json
import logging
import shutil

import pytest
import torch

from flytune_nb.artifacts import flydsl as fa
from flytune_nb.artifacts.export import export, preview
from flytune_nb.artifacts.files import ArtifactError
from flytune_nb.core.config import Config
from flytune_nb.core.device import from_properties, interpreter_device
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.measure.trial import Trial
from tests.conftest import H200_PROPS, MI300X_PROPS

MI300X = from_properties(MI300X_PROPS, hip=True)
IDENT_DEVICE = {"name": "AMD Instinct MI300X", "arch": "gfx942", "compute_units": 304}


def _cfg(bt, vec, wpe=None):
    return Config({"BLOCK_THREADS": bt, "VEC": vec}, num_warps=None, num_stages=None, waves_per_eu=wpe)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def at(flydsl_compiler, tmp_path, monkeypatch):
    """flydsl.autotune with artifacts on (FLYDSL_AUTOTUNE_CONFIG_DIR), its searched-winner cache isolated, no forced
    search, the GPU identity faked, and a handler on FlyDSL's logger (silent by default) collecting warnings."""
    mod = importlib.import_module("flydsl.autotune")  # `import flydsl.autotune as at` would bind the decorator
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(tmp_path / "flydsl_configs"))
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CACHE_DIR", str(tmp_path / "flydsl_scratch"))
    monkeypatch.delenv("FLYDSL_AUTOTUNE", raising=False)
    monkeypatch.setenv("ARCH", "gfx942")
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx942")
    monkeypatch.setattr(mod, "_device_descriptor", lambda device=None: dict(IDENT_DEVICE), raising=False)
    handler = _Warnings()
    logging.getLogger("flydsl").addHandler(handler)
    mod.warnings_seen = handler.messages
    yield mod
    logging.getLogger("flydsl").removeHandler(handler)


def _args(M=8, N=4096, dtype=torch.bfloat16, fused=False):
    x = torch.empty(M, N, dtype=dtype, device="meta")
    tag = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    w = torch.empty(N, dtype=dtype, device="meta")
    return (x, torch.empty_like(x), w, torch.empty_like(x), M, N, tag) if fused else (x, w, torch.empty_like(x), M, N,
                                                                                       tag)


def _counted(tuner):
    """Count what serving must never touch: the space, the heuristic default, the benchmark."""
    calls = {"configs": 0, "default": 0, "bench": 0}
    configs, default = tuner.configs, tuner.default

    def count(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapped

    tuner.configs, tuner.default = count("configs", configs), count("default", default)
    tuner._do_bench = count("bench", lambda *a, **k: pytest.fail("benchmarked while serving"))
    return calls


# -- the writer ----------------------------------------------------------------------------------------------------
def test_the_writer_imports_nothing_from_flydsl():
    tree = ast.parse(open(fa.__file__).read())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module] + \
               [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m == "flydsl" or m.startswith("flydsl.")]


CASES = [  # (kernel, declared key, key values ours, config, device identity)
    ("flydsl_rmsnorm", ("m_in", "N", "dtype"), {"m_in": 8, "N": 4096, "dtype": "bf16"}, _cfg(256, 8), IDENT_DEVICE),
    ("flydsl_rmsnorm", ("m_in", "N", "dtype"), {"m_in": 8, "N": 4096, "dtype": "bf16"}, _cfg(512, 4, 2), IDENT_DEVICE),
    ("flydsl_rmsnorm", ("N", "dtype"), {"N": 4096, "dtype": "bf16"}, _cfg(1024, 8), IDENT_DEVICE),
    ("flydsl_rmsnorm", ("x", "dtype"), {"x": torch.empty(8, 4096, device="meta"), "dtype": "bf16"}, _cfg(128, 8),
     IDENT_DEVICE),  # a tensor key arg: its shape (a list), never its dtype
    ("flydsl_fused_add_rmsnorm", ("m_in", "N", "dtype"), {"m_in": 8, "N": 4096, "dtype": "bf16"}, _cfg(256, 8, 4),
     {"name": "AMD Instinct MI355X", "arch": "gfx950", "compute_units": 256}),
    ("flydsl_rmsnorm", ("m_in", "N", "dtype"), {"m_in": 8, "N": 4096, "dtype": "bf16"}, _cfg(256, 8),
     {"name": "Radeon\u2122 PRO W7900 (\u00e9)", "arch": "gfx1100", "compute_units": 96}),  # \\u escapes
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_bytes_are_flydsls_own(case, at, tmp_path, monkeypatch):
    kernel, key, values, config, device = CASES[case]
    monkeypatch.setattr(at, "_device_descriptor", lambda d=None: dict(device))
    spec = get_kernel(kernel)
    fn = spec.extra["flydsl"].launcher()
    tuner = at.Autotuner(fn, [], list(key), 1, 1, artifact_name=spec.extra["flydsl"].name)
    args = _args(fused=kernel.startswith("flydsl_fused"))
    ref = tuner._artifact_ref(args, {}, required=True)
    tuner._emit_artifact(at.Config.from_dict(fa.body_of(config)), ref, args, {})
    theirs = ref[0]
    ours = fa.write(tmp_path / "ours", spec.extra["flydsl"].name, values, device, fa.body_of(config))
    assert ours.name == theirs.name and ours.read_bytes() == theirs.read_bytes()
    assert fa.read(ours)["config"] == fa.body_of(config)


# -- export from a results store -------------------------------------------------------------------------------------
def _store(tmp_path, device=MI300X, rows=None, name="s.db", kernel="flydsl_rmsnorm"):
    """A store as an AMD sweep leaves it: per shape the default and two other configs, timed."""
    from flytune_nb.core.key import make_key

    spec = get_kernel(kernel)
    store = Store(tmp_path / name)
    run = store.start_run(kernel, [], ["bf16"], "exhaustive", None, device.name,
                          device_info=dataclasses.asdict(device) if device is not None else None)
    rows = rows or {8: [(_cfg(256, 8), 0.010), (_cfg(512, 8, 2), 0.007), (_cfg(128, 8), 0.012)],
                    64: [(_cfg(256, 8), 0.020), (_cfg(1024, 4), 0.015)]}
    for M, trials in rows.items():
        shape = {"M": M, "N": 4096}
        key = make_key(spec, shape, "bf16", spec.make_inputs(shape, "bf16", interpreter_device()), device)
        for config, ms in trials:
            t = Trial(kernel, shape, "bf16", config, "ok", p20=ms, p50=ms, p80=ms, rel_error=1e-3, device=device.name)
            store.add(t, key=key.digest, run_id=run, arch=device.arch, toolchain=dict(key.toolchain),
                      is_default=config == spec.default(shape, "bf16", device), source=spec.fingerprint)
    return store


def test_an_amd_sweeps_winners_export_as_flydsl_configs_flydsl_serves_with_no_search(at, tmp_path, monkeypatch):
    store = _store(tmp_path)
    out = tmp_path / "exports"
    written = export(store, out)
    fly = sorted(p for p in written if p.parent.name == "flydsl_autotune")
    assert len(fly) == 2 and all(p.name.startswith("flytune_rmsnorm-") for p in fly)
    # beside them, the SGLang-style file, in FlyDSL's version folder, without warps or stages
    sglang = (out / "flydsl_rmsnorm" / f"flydsl_{fa_version()}" /
              "N=4096,device_name=AMD_Instinct_MI300X,dtype=bf16.json")
    assert json.loads(sglang.read_text()) == {"8": {"BLOCK_THREADS": 512, "VEC": 8, "waves_per_eu": 2},
                                              "64": {"BLOCK_THREADS": 1024, "VEC": 4}}
    prov = json.loads((out / "flydsl_autotune" / "provenance.json").read_text())
    assert set(prov) == {p.name for p in fly} and {p["shape"]["M"] for p in prov.values()} == {8, 64}
    assert all(p["device"] == "AMD_Instinct_MI300X" and p["toolchain"]["flydsl"] for p in prov.values())

    from flytune_nb.backends.flydsl import autotuner

    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(out / "flydsl_autotune"))
    spec = get_kernel("flydsl_rmsnorm")
    for M, want in ((8, {"BLOCK_THREADS": 512, "VEC": 8, "waves_per_eu": 2}), (64, {"BLOCK_THREADS": 1024, "VEC": 4})):
        tuner = autotuner(spec, device=MI300X)
        calls = _counted(tuner)
        got = tuner.resolve_config(*_args(M=M))
        assert got.to_dict() == want and calls == {"configs": 0, "default": 0, "bench": 0}, (M, calls)
        assert tuner.cache == {} and at.warnings_seen == []
        # byte for byte what FlyDSL itself would emit for that call
        ref = tuner._artifact_ref(_args(M=M), {}, required=True)
        ours = ref[0].read_bytes()
        tuner._emit_artifact(got, ref, _args(M=M), {})  # FlyDSL writes its own file for that call, over ours
        assert ref[0].read_bytes() == ours and ref[0].name in prov
    # the served config really completes the launcher: FlyDSL compiles it (no launch) into a 512-thread kernel
    import flydsl.compiler as flyc

    from flytune_nb._compat.flydsl import compile_hints
    from flytune_nb.backends.flydsl import resources

    got = autotuner(spec, device=MI300X).resolve_config(*_args(M=8))
    with compile_hints(got.compiler_opts()):
        compiled = flyc.compile(spec.extra["flydsl"].launcher(), *_args(M=8), **got.all_kwargs())
    assert resources(compiled)[0].max_workgroup == 512
    # a batch size that was not swept has no file (the key is exact): the heuristic default, silently
    tuner = autotuner(spec, device=MI300X)
    calls = _counted(tuner)
    assert tuner.resolve_config(*_args(M=37)).to_dict() == spec.default({"M": 37, "N": 4096}, "bf16", MI300X).to_dict()
    assert calls == {"configs": 0, "default": 1, "bench": 0} and at.warnings_seen == []


def test_lookup_serves_a_flydsl_kernel_only_the_batch_sizes_swept_as_flydsl_does(at, tmp_path, monkeypatch, capsys):
    """FlyDSL's offline configs are keyed on the exact batch size: no nearest entry. flytune's lookup (and so the
    tuned launcher's artifact step, and `flytune lookup`) serves what FlyDSL's own autotuner serves for every M."""
    import random

    from flytune_nb.backends.flydsl import autotuner
    from flytune_nb.serve.lookup import LOOKUP, artifact_hook, lookup
    from flytune_nb.ui.cli import main

    out = tmp_path / "exports"
    export(_store(tmp_path), out)
    monkeypatch.setenv("FLYDSL_AUTOTUNE_CONFIG_DIR", str(out / "flydsl_autotune"))
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", str(out))
    spec = get_kernel("flydsl_rmsnorm")
    LOOKUP.clear()
    unswept = random.sample([m for m in range(1, 200) if m not in (8, 64)], 4)
    for M in [8, 64, 9, 63] + unswept:
        theirs = autotuner(spec, device=MI300X).resolve_config(*_args(M=M)).to_dict()
        cfg, source = lookup(spec, {"M": M, "N": 4096}, "bf16", device=MI300X)
        assert cfg.to_dict() == theirs and source == ("artifact" if M in (8, 64) else "default"), (M, theirs)
        assert (artifact_hook(spec, {"M": M, "N": 4096}, "bf16", MI300X) is None) == (M not in (8, 64))
    LOOKUP.clear()
    capsys.readouterr()
    assert main(["lookup", "flydsl_rmsnorm", "M=37", "N=4096", "--dtype", "bf16", "--device", "mi300x"]) == 0
    assert "(source: default" in capsys.readouterr().out
    LOOKUP.clear()


def fa_version():
    from flytune_nb.backends import flydsl

    return flydsl.version().replace(".", "_")


def test_the_in_place_kernels_consumer_restores_its_residual(at):
    from flytune_nb.backends.flydsl import autotuner

    tuner = autotuner(get_kernel("flydsl_fused_add_rmsnorm"), device=MI300X)
    assert tuner.restore_value == ["residual"] and tuner.artifact_name == "flytune_fused_add_rmsnorm"
    assert tuner.key == ["m_in", "N", "dtype"]


def test_export_refuses_non_amd_timings_and_stores_that_do_not_name_the_gpu(at, tmp_path):
    """FlyDSL kernels only launch on AMD GPUs, so non-HIP timings of one can only come from a store made some other
    way; they are refused like interpreter timings for exports/, and nothing is written."""
    h200 = from_properties(H200_PROPS, hip=False)
    for device, name, match in ((h200, "h.db", r"need timings from an AMD GPU \(HIP\), and flydsl_rmsnorm's are "
                                               r"NVIDIA_H200 \(cuda\) timings"),
                                (interpreter_device(), "i.db", "CPU_interpreter \\(interpreter\\) timings"),
                                (None, "old.db", "does not record which GPU")):
        store = _store(tmp_path, device=device or MI300X, name=name)
        if device is None:
            store._db.execute("UPDATE runs SET device_info=NULL")
        out = tmp_path / f"out_{name}"
        with pytest.raises(ArtifactError, match=match):
            export(store, out)
        assert not out.exists()


def test_a_winner_flydsl_would_ignore_is_refused_at_export(at, tmp_path):
    """A stored config missing a knob (or carrying num_warps) would be ignored by FlyDSL with a warning; the export
    refuses it by name instead, before writing anything."""
    for config, match in ((Config({"BLOCK_THREADS": 512}, num_warps=None, num_stages=None), "knobs"),
                          (Config({"BLOCK_THREADS": 512, "VEC": 8}, num_warps=8, num_stages=None), "num_warps")):
        store = _store(tmp_path, rows={8: [(_cfg(256, 8), 0.01), (config, 0.001)]}, name=f"{match}.db")
        with pytest.raises(ArtifactError, match=match):
            export(store, tmp_path / f"out_{match}")
        assert not (tmp_path / f"out_{match}").exists()


def test_a_key_that_cannot_tell_two_winners_apart_is_refused(at, tmp_path):
    """A consumer keyed on (N, dtype) alone has one file for every M: with different winners at M=8 and M=64 there is
    no right file to write, and the export says so rather than pick one."""
    src = get_kernel("flydsl_rmsnorm").source_dir
    folder = tmp_path / "kernels" / "flydsl_rmsnorm_by_n"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("__pycache__"))
    init = folder / "__init__.py"
    text = init.read_text().replace('name="flydsl_rmsnorm"', 'name="flydsl_rmsnorm_by_n"').replace(
        '{"m_in": "M", "N": "N", "dtype": "dtype"}', '{"N": "N", "dtype": "dtype"}')
    init.write_text(text)
    paths = [str(folder.parent)]
    store = Store(tmp_path / "n.db")
    spec = get_kernel("flydsl_rmsnorm_by_n", paths)
    from flytune_nb.core.key import make_key

    run = store.start_run(spec.name, [], ["bf16"], "exhaustive", None, MI300X.name,
                          device_info=dataclasses.asdict(MI300X))
    for M, config in ((8, _cfg(512, 8)), (64, _cfg(1024, 4))):
        shape = {"M": M, "N": 4096}
        key = make_key(spec, shape, "bf16", spec.make_inputs(shape, "bf16", interpreter_device()), MI300X)
        store.add(Trial(spec.name, shape, "bf16", config, "ok", p50=0.01, rel_error=1e-3, device=MI300X.name),
                  key=key.digest, run_id=run, arch="gfx942", toolchain=dict(key.toolchain), source=spec.fingerprint)
    with pytest.raises(ArtifactError, match="share one FlyDSL identity"):
        export(store, tmp_path / "out", paths=paths)
    from flytune_nb.backends.flydsl import autotuner
    from flytune_nb.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"must name every axis and the dtype.*\['M'\]"):
        autotuner(spec)


def test_preview_shows_the_flydsl_files_an_export_would_write(at, tmp_path):
    store = _store(tmp_path)
    files = preview(store, tmp_path / "out")
    fly = [(p, new, old) for p, new, old in files if p.parent.name == "flydsl_autotune"]
    assert len(fly) == 2 and all(old == "" and json.loads(new)["version"] == 1 for _, new, old in fly)
    assert not (tmp_path / "out").exists()


# -- what FlyDSL refuses, refused by our writer first ------------------------------------------------------------------
BODY_CASES = {  # body -> FlyDSL's own warning reason
    "float for int": ({"BLOCK_THREADS": 256.0, "VEC": 8}, "does not match its annotation: expects int, got float"),
    "bool for int": ({"BLOCK_THREADS": True, "VEC": 8}, "does not match its annotation: expects int, got bool"),
    "string for int": ({"BLOCK_THREADS": "256", "VEC": 8}, "does not match its annotation: expects int, got str"),
    "waves_per_eu float": ({"BLOCK_THREADS": 256, "VEC": 8, "waves_per_eu": 2.0}, "compiler options must be integers"),
    "waves_per_eu string": ({"BLOCK_THREADS": 256, "VEC": 8, "waves_per_eu": "2"}, "compiler options must be integers"),
    "pre_hook": ({"BLOCK_THREADS": 256, "VEC": 8, "pre_hook": None}, "cannot contain Config.pre_hook"),
    "sets a key arg": ({"BLOCK_THREADS": 256, "VEC": 8, "N": 4096}, "would override call arguments: ['N']"),
    "not an object": ([256, 8], "config must be an object"),
}


@pytest.mark.parametrize("case", sorted(BODY_CASES))
def test_a_body_flydsl_ignores_is_one_our_writer_refuses(case, at):
    body, reason = BODY_CASES[case]
    ident = fa.identity("flytune_rmsnorm", {"m_in": 8, "N": 4096, "dtype": "bf16"}, IDENT_DEVICE)
    with pytest.raises(ArtifactError):
        fa.check_body(body, ("m_in", "N", "dtype"))
    import os
    from pathlib import Path

    path = Path(os.environ["FLYDSL_AUTOTUNE_CONFIG_DIR"]) / fa.file_name(ident)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "identity": ident, "config": body}, indent=2, sort_keys=True) + "\n")
    from flytune_nb.backends.flydsl import autotuner

    tuner = autotuner(get_kernel("flydsl_rmsnorm"), device=MI300X)
    calls = _counted(tuner)
    got = tuner.resolve_config(*_args())
    assert got.to_dict() == {"BLOCK_THREADS": 256, "VEC": 8}  # the heuristic default
    assert calls == {"configs": 0, "default": 1, "bench": 0}
    assert len(at.warnings_seen) == 1 and at.warnings_seen[0].startswith(f"Ignoring offline config {path.name}: ")
    assert reason in at.warnings_seen[0]


@pytest.mark.parametrize("case", ["identity mismatch", "version 2", "corrupt", "renamed"])
def test_an_envelope_flydsl_ignores_is_one_our_reader_refuses(case, at, tmp_path):
    import os
    from pathlib import Path

    root = Path(os.environ["FLYDSL_AUTOTUNE_CONFIG_DIR"])
    path = fa.write(root, "flytune_rmsnorm", {"m_in": 8, "N": 4096, "dtype": "bf16"}, IDENT_DEVICE,
                    {"BLOCK_THREADS": 512, "VEC": 8})
    data = json.loads(path.read_text())
    if case == "identity mismatch":  # the call's file name, another identity inside
        data["identity"]["device"]["compute_units"] = 228
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif case == "version 2":
        data["version"] = 2
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    elif case == "corrupt":
        path.write_text("{")
    else:  # a file that is fine but not under its identity's name: FlyDSL never looks for it
        path.rename(path.with_name("flytune_rmsnorm-" + "0" * 64 + ".json"))
        path = path.with_name("flytune_rmsnorm-" + "0" * 64 + ".json")
    with pytest.raises(ArtifactError):
        fa.read(path)
    from flytune_nb.backends.flydsl import autotuner

    tuner = autotuner(get_kernel("flydsl_rmsnorm"), device=MI300X)
    calls = _counted(tuner)
    assert tuner.resolve_config(*_args()).to_dict() == {"BLOCK_THREADS": 256, "VEC": 8}
    assert calls == {"configs": 0, "default": 1, "bench": 0}
    assert len(at.warnings_seen) == (0 if case == "renamed" else 1)


def test_names_flydsl_refuses_are_refused(at):
    for bad in ("", "a/b", "x" * 65, "caf\u00e9", "..", "-"):
        with pytest.raises(ArtifactError):
            fa.check_name(bad)
        with pytest.raises((TypeError, ValueError)):
            at.Autotuner(lambda N: None, [], ["N"], 1, 1, artifact_name=bad)
