"""HIP end to end on a described device (no AMD GPU here): the census targets' MI300X / MI355X properties give the
device name of the files, the AMD knobs reach the exported JSON, and lookups on that device read them back."""
import json
import warnings

import pytest
import triton

from flytune_nb.artifacts.export import export
from flytune_nb.artifacts.files import PROVENANCE, triton_dir_name
from flytune_nb.core.config import Config
from flytune_nb.core.key import make_key
from flytune_nb.core.registry import get_kernel
from flytune_nb.core.targets import TARGETS
from flytune_nb.engine.store import Store
from flytune_nb.measure.memory import meta_inputs
from flytune_nb.measure.trial import Trial
from flytune_nb.serve.lookup import ArtifactWarning, lookup

TDIR = triton_dir_name(triton.__version__)


pytestmark = pytest.mark.usefixtures("fresh_lookup_cache")


def _store_trials(store, spec, shape, dev, winner, p50=0.05):
    """The default and ``winner`` measured on ``dev`` (as a timing worker there would store them)."""
    key = make_key(spec, shape, "bf16", meta_inputs(spec, shape, "bf16", dev), dev)
    default = spec.default(shape, "bf16", dev)
    run = store.start_run(spec.name, [shape], ["bf16"], "exhaustive", None, dev.name)
    for config, t in ((default, 0.1), (winner, p50)):
        store.add(Trial(spec.name, shape, "bf16", config, "ok", p20=t, p50=t, p80=t, rel_error=1e-3, device=dev.name),
                  key=key.digest, run_id=run, arch=dev.arch, toolchain=dict(key.toolchain),
                  is_default=config == default, source=key.source)


def _hip_winner(space, **want):
    return next(c for c in space if all(c.get(k) == v for k, v in want.items()))


@pytest.mark.parametrize("alias", ["mi300x", "mi355x"])
def test_matmul_exports_amd_knobs_under_the_amd_name_and_looks_them_up(tmp_path, alias, capsys):
    dev = TARGETS[alias].device()
    spec = get_kernel("matmul")
    store = Store(tmp_path / "s.db")
    winners = {}
    for m in (64, 4096):
        shape = {"M": m, "N": 4096, "K": 4096}
        space = spec.configs(shape, "bf16", dev)
        want = {"waves_per_eu": 2, "matrix_instr_nonkdim": 32}
        if alias == "mi355x" and m == 4096:  # a tile only gfx950's 160 KiB of LDS holds (128 KiB of operands)
            want.update(BLOCK_SIZE_M=256, BLOCK_SIZE_N=256, BLOCK_SIZE_K=128, num_warps=8)
        winners[m] = _hip_winner(space, **want)
        _store_trials(store, spec, shape, dev, winners[m])
    out = tmp_path / "exports"
    written = export(store, out)
    name = f"N=4096,K=4096,device_name={TARGETS[alias].device_name},dtype=bf16.json"
    assert [p.name for p in written] == [name] and written[0].parent == out / "matmul" / TDIR
    table = json.loads(written[0].read_text())
    assert {int(m): Config.from_dict(c) for m, c in table.items()} == winners
    assert all(c["waves_per_eu"] == 2 and c["matrix_instr_nonkdim"] == 32 for c in table.values())
    prov = json.loads((written[0].parent / PROVENANCE).read_text())[name]
    assert {p["device"] for p in prov.values()} == {dev.name} and {p["arch"] for p in prov.values()} == {dev.arch}
    for m in (64, 4096):
        config, source = lookup(spec, {"M": m, "N": 4096, "K": 4096}, "bf16", device=dev, directory=out)
        assert (config, source) == (winners[m], "artifact")
        assert config.launch_options("hip")["waves_per_eu"] == 2
    # the CLI, as an engineer on a machine without that GPU asks: by alias, the target's own backend and space
    from flytune_nb.ui.cli import main

    assert main(["lookup", "matmul", "M=4096", "N=4096", "K=4096", "--device", alias, "--dir", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"{winners[4096]}  (source: artifact, device: {dev.name})" in printed.out, printed
    assert "warning" not in printed.err, printed.err
    # the same files on an H200: no file by that name, the heuristic default (with a warning), never AMD knobs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config, source = lookup(spec, {"M": 64, "N": 4096, "K": 4096}, "bf16", device=TARGETS["h200"].device(),
                                directory=out)
    assert source == "default" and not config.hip_only and any(w.category is ArtifactWarning for w in caught)
    store.close()


def test_fused_moe_files_are_named_for_the_mi300x_and_sglangs_amd_knobs_are_read_on_hip(tmp_path):
    """Our ROCm MoE space leaves waves_per_eu unset (SGLang's ROCm space: waves_per_eu 0), so its exports carry
    none; SGLang's own MI300X files do carry waves_per_eu, matrix_instr_nonkdim and kpack, and a lookup on HIP
    reads them into the config it launches with."""
    dev = TARGETS["mi300x"].device()
    spec = get_kernel("fused_moe")
    shape = spec.example()
    store = Store(tmp_path / "s.db")
    winner = _hip_winner(spec.configs(shape, "bf16", dev), num_warps=2)
    _store_trials(store, spec, shape, dev, winner)
    out = tmp_path / "exports"
    (path,) = export(store, out)
    assert path.name == "E=8,N=14336,device_name=AMD_Instinct_MI300X.json"
    assert Config.from_dict(json.loads(path.read_text())["64"]) == winner
    sglang = {"1": {**winner.to_dict(), "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}}
    path.write_text(json.dumps(sglang))
    config, source = lookup(spec, {**shape, "M": 1}, "bf16", device=dev, directory=out)
    assert source == "artifact" and config.launch_options("hip") == {
        **winner.launch_options("hip"), "waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 2}
    store.close()
