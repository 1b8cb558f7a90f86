"""SGLang-format export, runtime lookup, provenance and the regression guard, on the CPU interpreter."""
import dataclasses
import json
import os
import subprocess
import sys
import warnings

import pytest
import triton

from flytune_nb.artifacts import files as artifacts
from flytune_nb.artifacts.export import export, preview
from flytune_nb.artifacts.files import file_name, triton_dir_name
from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.serve.lookup import ArtifactWarning, lookup
from flytune_nb.serve.tuned import TunedKernel
from flytune_nb.ui.cli import main
from tests.conftest import PLUGINS, as_unprivileged_user

TDIR = triton_dir_name(triton.__version__)


pytestmark = pytest.mark.usefixtures("fresh_lookup_cache")


MALFORMED = {
    "invalid json": "{ nope",
    "empty file": "",
    "empty object": "{}",
    "non-numeric key": '{"triton_version": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}}',
    "non-dict value": '{"4": 256}',
    "missing knob": '{"4": {"BLOCK_N": 256, "num_warps": 1}}',
    "unknown knob": '{"4": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1, "GROUP_SIZE_M": 8}}',
    "bool knob": '{"4": {"BLOCK_N": true, "num_warps": 1, "num_stages": 1}}',
    "list top level": '[{"BLOCK_N": 256}]',
    "batch size 0": '{"0": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}}',
    "negative batch size": '{"-4": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}}',
    # which config serves batch size 4 is ambiguous: SGLang keeps the last silently
    "one batch size twice": '{"4": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}, '
                            '"04": {"BLOCK_N": 128, "num_warps": 1, "num_stages": 1}}',
    "one key twice": '{"4": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}, '
                     '"4": {"BLOCK_N": 128, "num_warps": 1, "num_stages": 1}}',
    "one knob twice": '{"4": {"BLOCK_N": 256, "BLOCK_N": 128, "num_warps": 1, "num_stages": 1}}',
    "list of configs": '{"4": [["BLOCK_N", 256]]}',
    # a value no launch takes: served, the wrapper divided N by 0 in the serving call
    "tile size 0": '{"4": {"BLOCK_N": 0, "num_warps": 1, "num_stages": 1}}',
    "negative tile size": '{"4": {"BLOCK_N": -64, "num_warps": 1, "num_stages": 1}}',
    "num_warps not a power of two": '{"4": {"BLOCK_N": 256, "num_warps": 3, "num_stages": 1}}',
}


def test_names_follow_sglang():
    spec = get_kernel("rmsnorm")
    assert file_name(spec, {"M": 7, "N": 4096}, "NVIDIA_H200", "bf16") == "N=4096,device_name=NVIDIA_H200,dtype=bf16.json"
    assert triton_dir_name("3.6.0") == "triton_3_6_0" and triton_dir_name("3.4.0+git1234") == "triton_3_4_0"
    with pytest.raises(artifacts.ArtifactError):
        file_name(spec, {"M": 1, "N": 8}, "../etc", "bf16")


def test_export_writes_only_knobs_is_byte_stable_and_keeps_provenance_beside(swept, tmp_path, dev):
    out = tmp_path / "exports"
    [path] = export(swept, out)
    assert path == out / "rmsnorm" / TDIR / f"N=256,device_name={dev.name},dtype=fp32.json"
    data = json.loads(path.read_text())
    assert list(data) == ["1", "4", "16"]  # numeric order, batch sizes only: SGLang int()s every key
    # BLOCK_M (rows per program) appears only where the best took more than one row
    assert all({"BLOCK_N", "num_stages", "num_warps"} <= set(v) <= {"BLOCK_M", "BLOCK_N", "num_stages", "num_warps"}
               and all(type(x) is int for x in v.values()) for v in data.values())
    first = path.read_bytes()
    export(swept, out)
    assert path.read_bytes() == first
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]
    assert set(prov) == {"1", "4", "16"}
    p = prov["4"]
    assert p["device"] == dev.name and p["toolchain"]["triton"] == triton.__version__ and p["run_id"]
    assert p["best_p50_ms"] > 0 and p["speedup"] == pytest.approx(p["default_p50_ms"] / p["best_p50_ms"])
    # the winner beat the default on the paired rounds' median ratio (the medians of each alone may still cross on
    # the interpreter's noisy timings), or is the default itself, timed once
    sel = p["selection"]
    assert (sel["winner"] == "candidate" and sel["margin"] > 0) or \
        (sel["winner"] == "default" and p["best_p50_ms"] == p["default_p50_ms"])
    assert p["source"] == get_kernel("rmsnorm").fingerprint and p["rel_error"] < 1e-5


def test_entries_the_provenance_does_not_record_are_kept_with_a_warning(swept, tmp_path):
    out = tmp_path / "exports"
    [path] = export(swept, out)
    data = json.loads(path.read_text())
    data["64"] = dict(data["16"])  # a colleague's hand-tuned entry
    path.write_text(json.dumps(data, indent=4) + "\n")
    with pytest.warns(ArtifactWarning, match=r"keeps batch sizes 64, which provenance.json does not record"):
        export(swept, out)
    assert json.loads(path.read_text())["64"] == data["16"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first export had nothing unrecorded to say
        export(swept, tmp_path / "fresh")


def test_only_configs_that_passed_are_exported(tmp_path, dev):
    db = tmp_path / "t.db"
    Sweep("toy", "N=64,128", ["fp32"], db=db, paths=[PLUGINS], isolate=False, baselines=()).run()
    [path] = export(Store(db), tmp_path / "ex", paths=[PLUGINS])
    assert {v["MODE"] for v in json.loads(path.read_text()).values()} == {0}


def test_lookup_takes_a_kernel_name_and_refuses_a_bad_shape_or_dtype_in_one_message(swept, tmp_path):
    from flytune_nb.errors import FlytuneError

    out = tmp_path / "exports"
    [path] = export(swept, out)
    by_name = lookup("rmsnorm", {"M": 4, "N": 256}, "float32", directory=out)
    assert by_name == lookup(get_kernel("rmsnorm"), {"M": 4, "N": 256}, "fp32", directory=out)
    assert by_name[1] == "artifact"
    for shape, dtype, said in (({"M": 4}, "fp32", r"missing \['N'\]"), ({"M": "4", "N": 256}, "fp32", "positive integer"),
                               ({"M": -4, "N": 256}, "fp32", "positive integer"), ([4, 256], "fp32", "a mapping"),
                               ({"M": 4, "N": 256}, "bfloat", "unknown dtype 'bfloat'")):
        with pytest.raises(FlytuneError, match=said):
            lookup("rmsnorm", shape, dtype, directory=out)


def test_a_tilde_in_flytune_config_dir_is_the_home_folder(swept, tmp_path, dev, monkeypatch):
    """A container's or a service unit's environment holds FLYTUNE_CONFIG_DIR=~/exports as written (no shell expands
    it): a serving process must read the exports there, not fall back to the heuristic default for a folder "~"."""
    home = tmp_path / "home"
    [path] = export(swept, home / "exports")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", "~/exports")
    monkeypatch.chdir(tmp_path)
    want = Config.from_dict(json.loads(path.read_text())["4"])
    assert lookup("rmsnorm", {"M": 4, "N": 256}, "fp32") == (want, "artifact")
    op = TunedKernel(get_kernel("rmsnorm"), device=dev, cache_dir=tmp_path / "cache")
    op(**get_kernel("rmsnorm").make_inputs({"M": 4, "N": 256}, "fp32", dev))
    assert op.last_source == "artifact"


def test_export_lookup_tuned_launch_round_trip(swept, tmp_path, dev):
    out = tmp_path / "exports"
    [path] = export(swept, out)
    table = {int(k): Config.from_dict(v) for k, v in json.loads(path.read_text()).items()}
    spec = get_kernel("rmsnorm")
    for m, want in [(1, 1), (3, 4), (7, 4), (10, 4), (11, 16), (1000, 16)]:  # nearest; tie (10) -> first in the file, the smaller
        cfg, source = lookup(spec, {"M": m, "N": 256}, "fp32", directory=out)
        assert (cfg, source) == (table[want], "artifact"), m
    os.environ["FLYTUNE_CONFIG_DIR"] = str(out)
    try:
        op = TunedKernel(spec, device=dev, cache_dir=tmp_path / "cache")
        inputs = spec.make_inputs({"M": 5, "N": 256}, "fp32", dev)
        y = op(**inputs)
    finally:
        del os.environ["FLYTUNE_CONFIG_DIR"]
    assert op.last_source == "artifact" and op.config_for(inputs) == table[4]
    ref = spec.reference(inputs)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_missing_triton_dir_falls_back_to_the_newest_with_a_warning(swept, tmp_path, dev):
    out = tmp_path / "exports"
    [path] = export(swept, out)
    (out / "rmsnorm" / "triton_2_9_0").mkdir()
    newest = out / "rmsnorm" / "triton_99_1_0"
    path.parent.rename(newest)
    with pytest.warns(ArtifactWarning, match=f"no {TDIR} in .*; using triton_99_1_0's, the newest folder that holds"):
        cfg, source = lookup(get_kernel("rmsnorm"), {"M": 4, "N": 256}, "fp32", directory=out)
    assert source == "artifact"


def _entry(warps):
    return {"BLOCK_N": 256, "num_warps": warps, "num_stages": 1}


@pytest.mark.parametrize("running", [True, False])
def test_each_file_comes_from_the_running_tritons_folder_else_the_newest_that_holds_it(running, tmp_path, dev):
    """SGLang's loader looks per file: a running-Triton folder without the file, or a newest folder without it,
    does not hide an older folder's file. The warning names the folder served."""
    spec = get_kernel("rmsnorm")
    kdir = tmp_path / "ex" / "rmsnorm"
    layout = {"triton_99_0_0": {256: 8}, "triton_2_9_0": {512: 4, 1024: 2}, "triton_2_8_0": {512: 1, 2048: 16}}
    if running:
        layout[TDIR] = {256: 32}
    for folder, files in layout.items():
        (kdir / folder).mkdir(parents=True)
        for n, warps in files.items():
            (kdir / folder / file_name(spec, {"N": n}, dev.name, "fp32")).write_text(json.dumps({"4": _entry(warps)}))
    served = {256: 32 if running else 8, 512: 4, 1024: 2, 2048: 16}
    for n, warps in served.items():
        folder = next(f for f in sorted(layout, key=lambda f: (f != TDIR, [-int(x) for x in f.split("_")[1:]]))
                      if n in layout[f])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg, source = lookup(spec, {"M": 4, "N": n}, "fp32", directory=tmp_path / "ex")
        assert (cfg.num_warps, source) == (warps, "artifact"), n
        said = [str(w.message) for w in caught]
        if folder == TDIR:
            assert said == []
        else:
            assert len(said) == 1 and f"using {folder}'s, the newest folder that holds it" in said[0], said
            assert (f"no N={n},device_name={dev.name},dtype=fp32.json in {TDIR}" if running else f"no {TDIR} in") \
                in said[0]
    with pytest.warns(ArtifactWarning, match=r"no config file N=64,.* in .*triton_.* or triton_"):
        assert lookup(spec, {"M": 4, "N": 64}, "fp32", directory=tmp_path / "ex")[1] == "default"


def test_a_tie_of_distance_goes_to_the_entry_first_in_the_file_as_in_sglangs_min(tmp_path, dev):
    """SGLang serves ``configs[min(configs.keys(), key=lambda x: abs(x - M))]`` over the file's keys in file order:
    of two entries as near, the one written first."""
    import random

    from flytune_nb.serve.lookup import LOOKUP

    spec = get_kernel("rmsnorm")
    folder = tmp_path / "ex" / "rmsnorm" / TDIR
    folder.mkdir(parents=True)
    path = folder / file_name(spec, {"N": 256}, dev.name, "fp32")
    warps = {1: 1, 3: 2, 9: 4, 16: 8}
    for keys in [[16, 3, 1], [1, 3, 16]] + [random.sample(list(warps), 4) for _ in range(4)]:
        path.write_text(json.dumps({str(k): _entry(warps[k]) for k in keys}))
        LOOKUP.clear()
        for m in range(1, 21):
            want = min(keys, key=lambda k: abs(k - m))
            cfg, source = lookup(spec, {"M": m, "N": 256}, "fp32", directory=tmp_path / "ex")
            assert (cfg.num_warps, source) == (warps[want], "artifact"), (keys, m)
        if keys[:3] == [16, 3, 1]:
            assert lookup(spec, {"M": 2, "N": 256}, "fp32", directory=tmp_path / "ex")[0].num_warps == warps[3]


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_artifacts_warn_and_fall_back_to_the_default(case, tmp_path, dev):
    spec = get_kernel("rmsnorm")
    folder = tmp_path / "ex" / "rmsnorm" / TDIR
    folder.mkdir(parents=True)
    (folder / file_name(spec, {"M": 4, "N": 256}, dev.name, "fp32")).write_text(MALFORMED[case])
    with pytest.warns(ArtifactWarning, match="using the heuristic default"):
        cfg, source = lookup(spec, {"M": 4, "N": 256}, "fp32", directory=tmp_path / "ex")
    assert (cfg, source) == (spec.default({"M": 4, "N": 256}, "fp32", dev), "default")


def test_foreign_device_traversal_and_missing_dir_never_raise(tmp_path, dev):
    spec = get_kernel("rmsnorm")
    folder = tmp_path / "ex" / "rmsnorm" / TDIR
    folder.mkdir(parents=True)
    (folder / "N=256,device_name=AMD_Instinct_MI300X,dtype=fp32.json").write_text(
        '{"4": {"BLOCK_N": 256, "num_warps": 1, "num_stages": 1}}')
    with pytest.warns(ArtifactWarning, match="AMD_Instinct_MI300X"):
        assert lookup(spec, {"M": 4, "N": 256}, "fp32", directory=tmp_path / "ex")[1] == "default"
    evil = dataclasses.replace(dev, name="../../x")
    with pytest.warns(ArtifactWarning, match="not a safe file-name part"):
        assert lookup(spec, {"M": 4, "N": 256}, "fp32", device=evil, directory=tmp_path / "ex")[1] == "default"
    with pytest.warns(ArtifactWarning, match="no exported configs"):
        assert lookup(spec, {"M": 4, "N": 256}, "fp32", directory=tmp_path / "nowhere")[1] == "default"


@pytest.mark.parametrize("unreadable", ["config dir", "kernel folder", "Triton folder"])
def test_an_unreadable_config_folder_is_one_warning_and_the_default_in_lookup_and_tuned(unreadable, shared_folder,
                                                                                        dev):
    """As for an unreadable file: the heuristic default with one warning, never an exception at serving time. Root
    reads any folder, so the lookups run as an unprivileged user."""
    from flytune_nb.serve.lookup import LOOKUP
    from flytune_nb.serve.tuned import tuned

    spec = get_kernel("rmsnorm")
    root = os.path.join(shared_folder, "ex")
    tdir = os.path.join(root, "rmsnorm", TDIR)
    os.makedirs(tdir)
    default = spec.default({"M": 4, "N": 256}, "fp32", dev)
    exported = next(c for c in spec.configs({"M": 4, "N": 256}, "fp32", dev) if c != default)
    with open(os.path.join(tdir, file_name(spec, {"N": 256}, dev.name, "fp32")), "w") as f:
        f.write(artifacts.render({4: exported.to_dict()}))
    cache = os.path.join(shared_folder, "cache")
    os.makedirs(cache)
    os.chmod(cache, 0o777)

    def serve():
        LOOKUP.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sources = [lookup(spec, {"M": m, "N": 256}, "fp32", directory=root)[1] for m in (1, 4, 9)]
            os.environ["FLYTUNE_CONFIG_DIR"] = root
            op = tuned("rmsnorm", cache_dir=cache)
            inputs = spec.make_inputs({"M": 5, "N": 256}, "fp32", dev)
            y = op(**inputs)
        ref = spec.reference(inputs)
        return (sources, op.last_source, str(op.config_for(inputs)), ((y.double() - ref).norm() / ref.norm()).item(),
                [str(w.message) for w in caught])

    sources, source, config, err, said = as_unprivileged_user(serve)
    assert (sources, source, config, said) == (["artifact"] * 3, "artifact", str(exported), []), said
    folder = {"config dir": root, "kernel folder": os.path.dirname(tdir), "Triton folder": tdir}[unreadable]
    os.chmod(folder, 0o000)
    try:
        sources, source, config, err, said = as_unprivileged_user(serve)
    finally:
        os.chmod(folder, 0o755)
    assert (sources, source, config) == (["default"] * 3, "default", str(spec.default({"M": 5, "N": 256}, "fp32", dev)))
    assert err < 1e-5
    assert len(said) == 1 and "not readable for this user; using the heuristic default" in said[0], said


def test_export_into_a_read_only_folder_is_one_artifact_error_and_writes_nothing(shared_folder, capsys):
    store_dir = os.path.join(shared_folder, "store")
    os.makedirs(store_dir)
    os.chmod(store_dir, 0o777)
    db = os.path.join(store_dir, "s.db")
    Sweep("rmsnorm", "M=1,4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    os.chmod(db, 0o666)
    out = os.path.join(shared_folder, "ex")
    [path] = export(Store(db), out)
    before = {p: open(os.path.join(path.parent, p), "rb").read() for p in os.listdir(path.parent)}
    Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    os.chmod(path.parent, 0o555)
    fresh = os.path.join(shared_folder, "ro")
    os.makedirs(fresh)
    os.chmod(fresh, 0o555)

    def refused():
        import contextlib
        import io

        said = []
        for target in (out, fresh):
            try:
                export(Store(db, readonly=True), target)
                said.append("written")
            except artifacts.ArtifactError as e:
                said.append(str(e))
        try:
            with artifacts.export_lock(path.parent):
                said.append("locked")
        except artifacts.ArtifactError as e:
            said.append(str(e))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["export", "--db", db, "--out", out])
        return said, rc, err.getvalue()

    try:
        said, rc, err = as_unprivileged_user(refused)
    finally:
        os.chmod(path.parent, 0o755)
    tdir = os.path.join(fresh, "rmsnorm", TDIR)
    assert said == [f"cannot write to {path.parent}: it is not writable for this user",
                    f"cannot write to {tdir}: {fresh}, where it would be made, is not writable for this user",
                    f"cannot write to {path.parent}: it is not writable for this user"], said
    assert rc == 2 and err.strip() == f"flytune: error: cannot write to {path.parent}: it is not writable for this " \
                                      "user", err
    assert {p: open(os.path.join(path.parent, p), "rb").read() for p in os.listdir(path.parent)} == before
    assert os.listdir(fresh) == []


def test_a_full_disk_while_exporting_leaves_the_file_and_its_provenance_as_they_were(swept, tmp_path, monkeypatch):
    """The config file and provenance.json describe each other: a write that fails part-way (the disk fills while
    the sidecar, the larger of the two, is written) must not leave a new table beside the old provenance, whose
    latencies, source and selection then describe configs the file no longer holds. The export is one
    ArtifactError naming the folder, and both files keep their bytes."""
    import errno

    out = tmp_path / "ex"
    [path] = export(swept, out)
    prov_path = path.parent / "provenance.json"
    table = json.loads(path.read_text())
    m, entry = next(iter(table.items()))
    edited = {**table, m: {**entry, "num_warps": entry["num_warps"] * 2}}  # what export will put back
    path.write_text(json.dumps(edited, indent=4) + "\n")
    before = {p.name: p.read_bytes() for p in (path, prov_path)}
    real_mkstemp = artifacts.tempfile.mkstemp

    def full_disk_for_the_sidecar(*args, **kw):
        fd, tmp = real_mkstemp(*args, **kw)
        if kw.get("prefix", "").startswith(".provenance.json"):
            os.close(fd)
            os.unlink(tmp)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fd, tmp

    monkeypatch.setattr(artifacts.tempfile, "mkstemp", full_disk_for_the_sidecar)
    with pytest.raises(artifacts.ArtifactError, match=r"cannot write .* No space left on device; it and its "
                                                      r"provenance.json are as they were"):
        export(swept, out)
    assert {p.name: p.read_bytes() for p in (path, prov_path)} == before
    assert sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")) == []
    monkeypatch.setattr(artifacts.tempfile, "mkstemp", real_mkstemp)
    export(swept, out)
    assert json.loads(path.read_text()) == table


def test_an_export_folder_below_a_file_names_the_file(tmp_path):
    """--out runs.db (a file) or a folder under it: mkdir's "Not a directory" does not say which part; the check
    every folder passes before any file is written names it."""
    db = tmp_path / "s.db"
    Sweep("rmsnorm", "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    for out in (db, db / "exports"):
        with pytest.raises(artifacts.ArtifactError, match=f"cannot write to {out}/rmsnorm/{TDIR}: {db} exists and is "
                                                          f"not a folder$"):
            export(Store(db), out)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("s.db-")) == ["s.db"]


def test_one_warning_per_file_not_per_call(tmp_path):
    spec = get_kernel("rmsnorm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in range(1, 20):
            lookup(spec, {"M": m, "N": 256}, "fp32", directory=tmp_path / "nowhere")
    assert len(caught) == 1


def test_two_processes_exporting_at_once_leave_valid_merged_files(tmp_path):
    dbs = []
    for i, grid in enumerate(["M=1,2 N=256", "M=3,5 N=256"]):
        db = tmp_path / f"{i}.db"
        Sweep("rmsnorm", grid, ["fp32"], db=db, isolate=False, baselines=()).run()
        dbs.append(db)
    out = tmp_path / "ex"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-m", "flytune_nb.ui.cli", "export", "--db", str(db), "--out", str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for db in dbs * 2]
    assert all(p.wait(120) == 0 for p in procs), [p.stderr.read() for p in procs]
    [f] = list((out / "rmsnorm").rglob("N=256,*.json"))
    assert sorted(json.loads(f.read_text()), key=int) == ["1", "2", "3", "5"]
    assert set(json.loads((f.parent / "provenance.json").read_text())[f.name]) == {"1", "2", "3", "5"}
    # nothing else is left beside SGLang's file: no temp file, and no lock file for a `git add` to commit
    assert sorted(p.name for p in f.parent.iterdir()) == sorted([f.name, "provenance.json"])


class _NoFolderFlock:
    """fcntl as NFS gives it: flock on a directory's descriptor is refused (EBADF), on a file it works."""
    import fcntl as _fcntl

    LOCK_EX = _fcntl.LOCK_EX

    @classmethod
    def flock(cls, fd, op):
        import errno
        import stat

        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        cls._fcntl.flock(fd, op)


def test_the_export_lock_keeps_another_process_waiting_and_leaves_nothing_in_the_folder(tmp_path):
    """Exports into one folder take turns (export_lock), and the lock leaves no file among SGLang's: users `git add`
    the folder. A lock file an older version left there is removed."""
    import time

    folder = tmp_path / "triton_3_6_0"
    folder.mkdir()
    (folder / artifacts.LOCK).write_text("")  # left by an older version
    child = ("import sys\nfrom flytune_nb.artifacts.files import export_lock\nprint('ready', flush=True)\n"
             "with export_lock(sys.argv[1]):\n    print('got it', flush=True)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with artifacts.export_lock(folder):
        assert list(folder.iterdir()) == []
        p = subprocess.Popen([sys.executable, "-c", child, str(folder)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "ready\n", p.stderr.read()
        time.sleep(1.0)
        assert p.poll() is None  # still waiting for the lock this process holds
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and out == "got it\n", err
    assert list(folder.iterdir()) == []


def test_where_a_folder_cannot_be_flocked_the_fallback_lock_file_is_there_only_while_held(tmp_path, monkeypatch):
    """NFS refuses flock on a directory: export_lock falls back to a lock file in the folder, which still keeps a
    second export waiting, and which its holder deletes on release."""
    import threading
    import time

    monkeypatch.setattr(artifacts, "fcntl", _NoFolderFlock)
    folder = tmp_path / "triton_3_6_0"
    folder.mkdir()
    trying, got = threading.Event(), threading.Event()

    def second():
        trying.set()
        with artifacts.export_lock(folder):
            got.set()

    with artifacts.export_lock(folder):
        assert [p.name for p in folder.iterdir()] == [artifacts.LOCK]
        t = threading.Thread(target=second)
        t.start()
        assert trying.wait(10)
        time.sleep(0.5)
        assert not got.is_set()  # still waiting for the lock this thread holds
    t.join(10)
    assert got.is_set() and not t.is_alive()
    assert list(folder.iterdir()) == []


def test_without_fcntl_the_module_imports_and_the_lock_leaves_nothing_behind(tmp_path):
    """Windows has no fcntl: the module still imports, and filelock's lock (whose Windows and soft kinds delete
    their file on release) stands in."""
    code = ("import os, sys\nsys.modules['fcntl'] = None\nfrom flytune_nb.artifacts import files\n"
            "assert files.fcntl is None\nwith files.export_lock(sys.argv[1]):\n    pass\n"
            "print(os.listdir(sys.argv[1]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "[]\n", p.stderr[-2000:]


def test_export_never_mixes_kernel_source_versions(tmp_path, capsys):
    """Sweep M=1,4; edit the kernel (new fingerprint); re-sweep M=4 only. Exporting would leave M=1 of the old
    source beside M=4 of the new: refused, with the grid that re-sweeps the whole file, nothing written;
    --replace-stale drops the old entries, saying which. Re-sweeping every batch size replaces them without asking."""
    db = tmp_path / "v.db"
    Sweep("rmsnorm", "M=1,4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    out = tmp_path / "ex"
    [path] = export(Store(db), out)
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "4"]
    before = path.read_text(), (path.parent / "provenance.json").read_text()
    edited = dataclasses.replace(get_kernel("rmsnorm"), fingerprint="edited-source")
    Sweep(edited, "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    with pytest.warns(ArtifactWarning) as caught, \
            pytest.raises(artifacts.ArtifactError, match=r'\(source edited-source, timing events\).*never mixes.*'
                                                        r'--grid "M=1,4 \.\.\."'):
        export(Store(db), out)
    assert {"older source of the kernel" in str(w.message) for w in caught} == {True, False}  # and the left-out M=1
    assert (path.read_text(), (path.parent / "provenance.json").read_text()) == before
    assert main(["export", "--db", str(db), "--out", str(out)]) == 2
    assert "--replace-stale" in capsys.readouterr().err
    with pytest.warns(ArtifactWarning) as caught:
        export(Store(db), out, replace_stale=True)
    said = [str(w.message) for w in caught]
    # the store's M=1 rows are of the old source, and the file's M=1 entry goes: both said, with what to do
    assert any("batch sizes 1 were measured in this store only on an older" in m and '--grid "M=1,4 ..."' in m
               for m in said), said
    assert any("--replace-stale drops batch sizes 1," in m and "nearest of 4" in m for m in said), said
    assert list(json.loads(path.read_text())) == ["4"]
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]
    assert list(prov) == ["4"] and prov["4"]["source"] == "edited-source"
    Sweep(edited, "M=1,4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    with pytest.warns(ArtifactWarning):
        export(Store(db), out)
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "4"]


def test_a_shape_cut_off_mid_search_is_left_out_until_the_sweep_resumes(tmp_path, capsys):
    """A sweep stopped during M=16's search leaves that shape's first trials and no selection: exporting then writes
    M=1 and M=4, says M=16 was left out and how to finish it, and leaves M=16 to lookup's nearest entry rather than
    the fastest of part of a search. Running the same sweep again finishes M=16 and the export takes it."""
    from flytune_nb.core.events import TrialDone

    db = tmp_path / "cut.db"
    sweep = None

    def stop_in_m16(event):
        if isinstance(event, TrialDone) and event.trial.shape["M"] == 16:
            sweep.stop()

    sweep = Sweep("rmsnorm", "M=1,4,16 N=256", ["fp32"], db=db, isolate=False, baselines=(), listeners=[stop_in_m16])
    sweep.run()
    store = Store(db)
    m16 = store.frame("rmsnorm")
    assert (m16["M"] == 16).any(), "the stop came after M=16's first trial was stored"
    assert not (store.frame("rmsnorm", table="selections")["M"] == 16).any()
    out = tmp_path / "ex"
    with pytest.warns(ArtifactWarning, match=r"batch sizes 16 are left out: the sweep .* stopped .* run the same "
                                             r"sweep again"):
        [path] = export(store, out)
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "4"]
    assert sorted(json.loads((path.parent / "provenance.json").read_text())[path.name], key=int) == ["1", "4"]
    Sweep("rmsnorm", "M=1,4,16 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArtifactWarning)
        export(Store(db), out)
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "4", "16"]


def test_the_first_shape_of_a_fresh_store_cut_off_mid_search_is_never_exported(tmp_path):
    """A fresh store whose first sweep is stopped (or killed) during its only shape's search holds no selection at
    all, of any shape: the shape's fastest is still of part of a search that nothing re-timed against the default,
    so export leaves it out with the warning, exactly as it does when another shape's selection is in the store.
    Running the same sweep again finishes it and the export takes it."""
    from flytune_nb.core.events import TrialDone

    db = tmp_path / "fresh.db"
    holder = {}

    def stop_after_two(event):
        if isinstance(event, TrialDone) and event.index >= 1:
            holder["total"] = event.total
            holder["sweep"].stop()

    holder["sweep"] = Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(),
                            listeners=[stop_after_two])
    holder["sweep"].run()
    store = Store(db)
    assert 2 <= store.count() < holder["total"], "stopped part-way through the search"
    assert store.count("selections") == 0
    out = tmp_path / "ex"
    with pytest.warns(ArtifactWarning, match=r"batch sizes 4 are left out: the sweep .* stopped"):
        assert export(store, out) == []
    assert not out.exists() or not any(p.suffix == ".json" for p in out.rglob("*"))
    Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArtifactWarning)
        [path] = export(Store(db), out)
    assert list(json.loads(path.read_text())) == ["4"]


def test_timing_listed_configs_on_a_cut_off_shape_does_not_finish_its_search(tmp_path):
    """The heuristic editor's Measure missing times the configs it is given (configs=..., selection off) on a shape
    whose search Stop cut off, and re-measures the default and the pick, taking over their trial rows: that run
    finishes, but it searched no space, so the shape stays cut off and export still leaves it out, even where the
    listed run re-measured every trial the search had stored."""
    from flytune_nb.artifacts.unfinished import unfinished_keys
    from flytune_nb.core.events import TrialDone

    db = tmp_path / "cut.db"
    holder, timed = {}, []

    def stop_after_two(event):
        if isinstance(event, TrialDone):
            timed.append(event.trial.config)
            if event.index >= 1:
                holder["total"] = event.total
                holder["sweep"].stop()

    holder["sweep"] = Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(),
                            listeners=[stop_after_two])
    holder["sweep"].run()
    cut = unfinished_keys(Store(db))
    assert len(cut) == 1 and 2 <= Store(db).count() < holder["total"]
    listed = Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None,
                   configs=timed, remeasure=timed)
    listed.run()
    store = Store(db)
    runs = store.frame("rmsnorm", table="runs")
    assert runs.loc[runs["run_id"] == listed.run_id, "finished"].notna().all()
    assert set(store.frame("rmsnorm")["run_id"]) == {listed.run_id}  # every trial row is the listed run's now
    assert unfinished_keys(store) == cut
    with pytest.warns(ArtifactWarning, match=r"batch sizes 4 are left out: the sweep .* stopped"):
        assert export(store, tmp_path / "ex") == []
    Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()  # the search, resumed
    assert unfinished_keys(Store(db)) == set()


def test_a_shape_finished_without_a_selection_is_exported_once_a_run_has_finished_it(tmp_path):
    """Selection off, a sweep stopped just after M=4's search ended, before M=8's began: M=4 has trials and no
    selection, from a run never marked finished, so it is left out (nothing says its search ended), and only for rmsnorm, the kernel whose
    selections the store holds: softmax, stopped the same way, is judged on its own and never had one. Running the
    rmsnorm sweep again measures nothing new and finishes, which is what clears M=4."""
    from flytune_nb.artifacts.unfinished import unfinished_keys
    from flytune_nb.core.events import ShapeDone

    db = tmp_path / "off.db"
    Sweep("rmsnorm", "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=()).run()  # selection on: the store has some

    for kernel in ("rmsnorm", "softmax"):
        holder = {}

        def stop_after_m4(event, holder=holder):
            if isinstance(event, ShapeDone) and event.result.shape["M"] == 4:
                holder["sweep"].stop()
        # a Stop after the grid's last shape is done cuts nothing short (the run is finished): M=8 is still to come
        holder["sweep"] = Sweep(kernel, "M=4,8 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None,
                                listeners=[stop_after_m4])
        holder["sweep"].run()
    store = Store(db)
    cut = unfinished_keys(store)
    assert {k for k in cut if "softmax" in k} == set() and len(cut) == 1
    assert unfinished_keys(store, "rmsnorm") == cut and unfinished_keys(store, "softmax") == set()
    out = tmp_path / "ex"
    with pytest.warns(ArtifactWarning, match="batch sizes 4 are left out"):
        written = export(store, out)
    files = {p.parent.parent.name: p for p in written}
    assert list(json.loads(files["rmsnorm"].read_text())) == ["1"]
    assert list(json.loads(files["softmax"].read_text())) == ["4"]
    again = Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None)
    again.run()
    assert again.measured == 0  # resumed: nothing timed again
    store = Store(db)
    assert unfinished_keys(store) == set()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArtifactWarning)
        export(store, out)
    assert sorted(json.loads(files["rmsnorm"].read_text()), key=int) == ["1", "4"]


def test_the_selections_winner_is_exported_even_where_its_search_trial_failed(tmp_path):
    """The heuristic default fails its first launch (a transient fault) and passes every round of the re-timing,
    where no candidate beats it: the selection keeps it. Export writes the default, with the selection's evidence,
    not the search's fastest (the very candidate the selection turned down) for want of a passing search trial."""
    from flytune_nb.strategies.selection import Rule

    from flytune_nb.core.device import current_device

    spec = get_kernel("rmsnorm")
    failed_once = []

    def run(inputs, config):
        if config == spec.default({"M": 4, "N": 256}, "fp32", current_device()) and not failed_once:
            failed_once.append(config)
            raise RuntimeError("transient launch failure")
        return spec.run(inputs, config)

    db = tmp_path / "flaky.db"
    keep_default = Rule(top=1, rounds=3, floor=0.99)  # only a candidate 100x faster would replace the default
    [result] = Sweep(dataclasses.replace(spec, run=run), "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(),
                     selection=keep_default).run()
    default = result.default
    assert failed_once == [default] and result.default_trial.status == "launch_error"
    assert result.selection.winner == default and result.best.config != default
    with pytest.warns(ArtifactWarning, match="M=4: tie band of 99%"):  # the 99% floor is this test's own
        [path] = export(Store(db), tmp_path / "ex")
    assert json.loads(path.read_text()) == {"4": default.to_dict()}
    record = json.loads((path.parent / "provenance.json").read_text())[path.name]["4"]
    assert record["selection"]["winner"] == "default" and record["default_config"] == default.to_dict()


def test_bad_export_targets_and_sidecars_are_one_clear_error(swept, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["export", "--db", str(swept.path), "--out", str(blocker)]) == 2
    assert f"{blocker} exists and is not a folder" in capsys.readouterr().err
    out = tmp_path / "ex"
    [path] = export(swept, out)
    before = path.read_text()
    (path.parent / "provenance.json").write_text("[]")
    with pytest.raises(artifacts.ArtifactError, match="provenance.json: expected"):
        export(swept, out)
    assert path.read_text() == before  # nothing written when the sidecar is bad


def test_an_export_beside_an_unreadable_provenance_json_writes_nothing_and_says_how_to_restore_it(tmp_path, capsys):
    """export rewrites a folder's provenance.json whole, so one it cannot read (a merge conflict left in it) is
    refused rather than rewritten, which would drop every other file's records. The refusal comes before any file
    of the export is written — also where the file itself is new to that folder, and another folder is written
    first — and says what to do. The workbench's preview shows that refusal, not a new file."""
    db = tmp_path / "two.db"
    for kernel in ("rmsnorm", "softmax"):  # two folders: rmsnorm/ is written before softmax/
        Sweep(kernel, "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None).run()
    out = tmp_path / "ex"
    folder = out / "softmax" / TDIR
    folder.mkdir(parents=True)
    sidecar = folder / "provenance.json"
    sidecar.write_text('<<<<<<< HEAD\n{"N=512,device_name=NVIDIA_H200,dtype=bf16.json": {}}\n')
    assert main(["export", "--db", str(db), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"flytune: error: {sidecar}: not readable JSON (") and "\n" not in err, err
    assert "restore it from version control (or finish the merge that left it so)" in err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "softmax", f"softmax/{TDIR}", f"softmax/{TDIR}/provenance.json"]  # nothing written, rmsnorm/ included
    assert sidecar.read_text().startswith("<<<<<<< HEAD")
    shown = {path.parent.parent.name: text for path, text, _ in preview(Store(db), out)}
    assert shown["softmax"].startswith(f"(not written: {sidecar}: not readable JSON")
    assert shown["rmsnorm"].startswith("{")


def test_a_file_whose_entries_start_far_above_small_batch_sizes_says_which_sizes_its_nearest_entry_would_serve(
        tmp_path):
    """An engine's lookup serves the nearest batch size's entry, however far: a file of M=64 alone would serve M=1
    M=64's config. The preview and the export name the SGLang batch sizes whose served entry is more than 8x away,
    and that entry. Deleting the file, as the warning offers, starts it afresh (its provenance record too); with the
    small sizes swept the export says nothing."""
    db, small = tmp_path / "far.db", tmp_path / "small.db"
    # Only where the file's entries lie matters, not which config M=64 keeps: 2 of its 26 configs (all 26 take ~4 s
    # interpreted on 2 cores).
    Sweep("rmsnorm", "M=64 N=256", ["fp32"], db=db, isolate=False, baselines=(), budget=2).run()
    out = tmp_path / "ex"
    far = (r"entries M=64; lookup would serve batch sizes 1 \(from M=64\), 2 \(from M=64\), 4 \(from M=64\) an "
           r"entry more than 8x away")
    with pytest.warns(ArtifactWarning, match=far):
        preview(Store(db), out)  # says it before anything is written
    assert not out.exists()
    with pytest.warns(ArtifactWarning, match=far) as caught:
        [path] = export(Store(db), out)
    assert list(json.loads(path.read_text())) == ["64"]
    assert sum("an entry more than 8x away" in str(w.message) for w in caught) == 1
    path.unlink()
    Sweep("rmsnorm", "M=1,8 N=256", ["fp32"], db=small, isolate=False, baselines=()).run()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArtifactWarning)
        export(Store(small), out)
        assert sorted(json.loads(path.read_text()), key=int) == ["1", "8"]
        assert sorted(json.loads((path.parent / "provenance.json").read_text())[path.name], key=int) == ["1", "8"]
        export(Store(db), out)
    assert sorted(json.loads(path.read_text()), key=int) == ["1", "8", "64"]

def test_a_pick_timed_beside_a_fresh_default_competes_on_the_searchs_clock_where_no_selection_decided(tmp_path):
    """A shape swept without the selection stage is exported with the search's fastest median. A config the
    heuristic editor's Measure missing timed later (beside a fresh timing of the default, its retimes row of round
    -1) is compared on the search's clock, default stored / default fresh, as every view of the sweep shows it: its
    raw median, taken under another load, would otherwise win or lose on the load."""
    import random
    import sqlite3

    from flytune_nb.core.device import current_device

    db = tmp_path / "runs.db"
    spec = get_kernel("rmsnorm")
    Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None,
          strategy="random", budget=2).run()
    store = Store(db)
    df = store.frame("rmsnorm")
    default = Config.from_json(df[df["is_default"] == 1]["config"].iloc[0])
    timed = set(df["config"])
    new = next(c for c in spec.configs({"M": 4, "N": 256}, "fp32", current_device()) if c.to_json() not in timed)
    store.close()
    Sweep("rmsnorm", "M=4 N=256", ["fp32"], db=db, isolate=False, baselines=(), selection=None,
          configs=[default, new], beside=[default]).run()
    load = random.uniform(2.0, 4.0)  # the Measure-missing run's load: everything it timed took this much longer
    with sqlite3.connect(db) as con:
        (d_then,) = con.execute("SELECT p50 FROM trials WHERE is_default=1").fetchone()
        best_search = con.execute("SELECT MIN(p50) FROM trials WHERE config != ?", (new.to_json(),)).fetchone()[0]
        con.execute("UPDATE retimes SET p50=? WHERE round=-1", (d_then * load,))
        # on the search's clock the new pick is 0.8x the search's best; its raw median is load x that
        con.execute("UPDATE trials SET p50=?, p20=?, p80=? WHERE config=?", (*[best_search * 0.8 * load] * 3,
                                                                             new.to_json()))
    con.close()
    out = tmp_path / "ex"
    reader = Store(db, readonly=True)
    try:
        [path] = export(reader, out)
    finally:
        reader.close()
    assert json.loads(path.read_text())["4"] == new.to_dict(), (new, path.read_text())
    prov = json.loads((path.parent / "provenance.json").read_text())[path.name]["4"]
    assert prov["best_p50_ms"] == pytest.approx(best_search * 0.8)


def test_an_entry_decided_with_a_tie_band_too_wide_to_tell_configs_apart_is_exported_with_a_warning(swept, tmp_path):
    """On a busy CPU the noise-adaptive band can reach 300%: the default is then kept against a config 4x faster.
    The entry is still written (the default is a correct config), but the export says which and how wide."""
    import json
    import sqlite3
    import warnings

    from flytune_nb.artifacts.export import preview

    with sqlite3.connect(swept.path) as c:
        key, summary = c.execute("SELECT key, summary FROM selections WHERE shape LIKE '%\"M\":4%'").fetchone()
        wide = {**json.loads(summary), "winner": "default", "band": 3.0, "margin": 0.75}
        c.execute("UPDATE selections SET summary=? WHERE key=?", (json.dumps(wide), key))
    swept._db.commit()
    said = r"M=4: tie band of 300%, the best candidate took 75.0% less time than the default; .* over 25%"
    with pytest.warns(ArtifactWarning, match=said):
        preview(swept, tmp_path / "p")
    with pytest.warns(ArtifactWarning, match=said) as caught:
        export(swept, tmp_path / "out")
    assert not any("M=1," in str(w.message) or "M=16" in str(w.message) for w in caught)  # their bands are sane
    with sqlite3.connect(swept.path) as c:
        c.execute("UPDATE selections SET summary=? WHERE key=?", (summary, key))
    swept._db.commit()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArtifactWarning)
        export(swept, tmp_path / "again")
