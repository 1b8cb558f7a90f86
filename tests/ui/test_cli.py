"""The command line: usage errors as one line and exit 2, the kernels listing, sweep / export / lookup / check /
cache from argv, and their messages."""
import json
import os
import re
import sqlite3
import sys

import pytest

from flytune_nb.engine.store import Store
from flytune_nb.engine.sweep import Sweep
from flytune_nb.ui.cli import main
from tests.conftest import PLUGINS, as_unprivileged_user, count_rows

# the lookup's parsed tables are emptied around every test: they write export files into tmp folders
pytestmark = pytest.mark.usefixtures("fresh_lookup_cache")


@pytest.mark.parametrize("argv, msg", [
    (["sweep", "rmsnrom", "--grid", "M=1 N=8"], "Did you mean 'rmsnorm'"),
    (["sweep", "rmsnorm", "--grid", "M=1,a N=8"], "not a positive integer"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--dtype", "fp4"], "unknown dtype 'fp4'; rmsnorm supports bf16, fp16, fp32$"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--dtype", "fp8"], "rmsnorm supports bf16, fp16, fp32; got fp8"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--strategy", "magic"], "unknown strategy"),
    (["sweep", "rmsnorm", "--grid", "M=100000000 N=100000000"], "needs ~.* GiB"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--tie-band", "150"], "--tie-band is a percentage"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--select-top", "-1"], "--select-top must be >= 0"),
    # past what the store's INTEGER column holds: refused before the store is opened, not an OverflowError
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--budget", str(2**63)], "budget 9223372036854775808 is more than"),
    # `--gpus "$GPUS"` with the variable unset: not one worker on whatever GPU comes first
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--gpus", ""], r"--gpus '' names no GPU"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--gpus", " , "], r"--gpus ' , ' names no GPU"),
    # lookup takes one shape, and its messages say shape, not grid
    (["lookup", "rmsnorm", "M=37"], r"^flytune: error: shape must set each of the kernel's axes \['M', 'N'\]; missing \['N'\]$"),
    (["lookup", "rmsnorm", "M37", "N=256"], "shape term 'M37' is not AXIS=value"),
    (["lookup", "rmsnorm", "M=1,2", "N=256"], r"lookup takes one shape, one value for each axis of rmsnorm \(e\.g\. M=\d+ N=\d+\)"),
])
def test_cli_user_errors_are_one_line_and_exit_2(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flytune: error:")
    assert re.search(msg, err), err


def test_cli_kernels_lists_axes_dtypes_and_space(capsys):
    assert main(["kernels", "--path", PLUGINS]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("rmsnorm "))
    assert "M,N" in line and "bf16,fp16,fp32" in line and "@ M=4096 N=4096" in line
    assert any(l.startswith("toy ") for l in out.splitlines())


def test_cli_kernels_on_a_terminal_names_each_kernel_while_it_loads(monkeypatch, capsys):
    """A kernel's import can take seconds (SGLang's): on a terminal one status line names the kernel being loaded,
    and is cleared before the table; piped, stderr stays empty."""
    import io
    import sys

    class Tty(io.StringIO):
        def isatty(self):
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["kernels", "--path", PLUGINS]) == 0
    said = err.getvalue()
    assert "\rloading rmsnorm ...\033[K" in said and "\rloading toy ...\033[K" in said
    assert said.endswith("\r\033[K")  # nothing of it left above the table
    assert "rmsnorm " in capsys.readouterr().out
    monkeypatch.undo()
    assert main(["kernels", "--path", PLUGINS]) == 0
    assert capsys.readouterr().err == ""


def test_cli_sweep_prints_trials_and_summary(capsys):
    rc = main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64,100", "--dtype", "fp32"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "N=64 fp32 on CPU_interpreter" in out
    assert out.count("wrong") >= 4 and "launch_error" in out  # failures listed with their status
    summary = out[out.index("shape "):]
    assert summary.count("2/8") == 2  # two shapes, 2 of 8 configs passed each



def test_cli_sweep_takes_a_comma_list_in_one_dtype_option(tmp_path, capsys):
    """--dtype is repeatable, and one --dtype fp32,bf16 is the same two dtypes (as the notebook's dtypes and
    Sweep(..., "fp32,bf16") take them), not one dtype called 'fp32,bf16' that the kernel 'does not support'."""
    import sqlite3

    db = tmp_path / "d.db"
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--db", str(db), "--quiet", "--no-isolate",
            "--select-top", "0"]
    assert main(argv + ["--dtype", "fp32,bf16"]) == 0, capsys.readouterr().err
    with sqlite3.connect(db) as c:
        assert {r[0] for r in c.execute("SELECT dtype FROM trials")} == {"fp32", "bf16"}
        assert {r[0] for r in c.execute("SELECT status FROM trials")} >= {"ok"}  # the right configs passed
    assert main(argv + ["--dtype", "fp32", "--dtype", "fp16,bf16"]) == 2
    assert capsys.readouterr().err.strip().endswith("toy supports fp32, bf16; got fp16")

def test_cli_sweep_selection_and_timing_options(tmp_path, capsys):
    """--select-top/--select-rounds/--tie-band set the rule, --timing the mode; the summary says the pick and why;
    --select-top 0 leaves the fastest median as the winner, re-timing nothing."""
    import sqlite3

    db = tmp_path / "s.db"
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", str(db), "--quiet",
            "--no-isolate"]
    assert main(argv + ["--select-top", "1", "--select-rounds", "2", "--tie-band", "5", "--timing", "graph"]) == 0
    out, err = capsys.readouterr()
    # no CUDA graph on the interpreter: its timer runs the mode's plumbing, which the user is told
    assert "--timing graph on Triton's CPU interpreter: there is no CUDA graph here" in err
    assert " pick " in out and ("default kept" in out or "beyond the" in out or "no candidate" in out)
    with sqlite3.connect(db) as c:
        assert {r[0] for r in c.execute("SELECT timing FROM trials")} == {"graph"}
        [(rule,)] = c.execute("SELECT rule FROM selections").fetchall()
    assert '"floor": 0.05' in rule and '"rounds": 2' in rule and '"top": 1' in rule
    assert main(argv + ["--select-top", "0", "--grid", "N=32"]) == 0
    assert "--timing graph" not in capsys.readouterr().err
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM selections WHERE shape='{\"N\":32}'").fetchone()[0] == 0


@pytest.mark.parametrize("argv, msg", [
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--budget", "0"], "argument --budget: must be an integer >= 1, got '0'"),
    (["sweep", "rmsnorm", "--grid", "M=1 N=8", "--timeout", "-1"], "argument --timeout: must be a number of seconds"),
    (["sweep", "--grid", "M=1 N=8"], "the following arguments are required: kernel"),
    (["sweap", "rmsnorm"], "invalid choice: 'sweap'"),
])
def test_argument_errors_are_one_line_and_exit_2(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("flytune") and msg in err and "--help)" in err, err


def test_a_broken_plugin_does_not_hide_the_others(tmp_path, capsys):
    import shutil

    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "broken")
    (tmp_path / "broken" / "kernel.py").write_text("def oops(:\n")
    assert main(["kernels", "--path", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "ERROR: kernel folder" in out and "SyntaxError" in out and any(l.startswith("rmsnorm ") for l in
                                                                         out.splitlines())


def test_cli_sweep_writes_the_store_and_resumes(tmp_path, capsys):
    from flytune_nb.ui.cli import main

    db = tmp_path / "cli.db"
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", str(db), "--quiet",
            "--no-isolate"]
    assert main(argv) == 0 and count_rows(db) == 8
    first = capsys.readouterr().out
    assert "results in" in first and "2/8" in first
    timed = re.search(rf"8 trials in {re.escape(str(db))} \((\d+) timings this run\)", first)
    assert timed and int(timed.group(1)) >= 8, first  # the 8 configs, then the selection stage's re-timings
    assert main(argv) == 0 and count_rows(db) == 8  # resumed: every trial and the selection come from the store
    assert f"8 trials in {db} (nothing new measured: every trial was already in the store)" in capsys.readouterr().out
    assert main(argv + ["--strategy", "random", "--budget", "3"]) == 0 and count_rows(db) == 8  # all stored already
    assert "results in" in capsys.readouterr().out
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--gpus", "0,x"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--baselines", "torch_jit"]) == 2


def test_cli_export_and_lookup(swept, tmp_path, capsys):
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    assert main(["lookup", "rmsnorm", "M=5", "N=256", "--dtype", "fp32", "--dir", str(out)]) == 0
    assert "(source: artifact" in capsys.readouterr().out
    assert main(["lookup", "rmsnorm", "M=5", "N=512", "--dtype", "fp32", "--dir", str(out)]) == 0
    captured = capsys.readouterr()
    assert "(source: default" in captured.out and "warning: no config file" in captured.err
    assert main(["export", "--db", str(tmp_path / "missing.db")]) == 2
    assert main(["lookup", "rmsnorm", "M=5", "N=256", "--dir", str(tmp_path / "nowhere")]) == 2
    assert f"--dir {tmp_path / 'nowhere'} is not a folder" in capsys.readouterr().err


def test_export_of_a_dtype_the_store_has_no_trials_in_is_a_usage_error_naming_what_it_holds(swept, tmp_path, capsys):
    """As for --kernel: a dtype the store was never swept in is the user's mistake (exit 2, what the store holds),
    not a run that found nothing to export."""
    import random

    out = tmp_path / "ex"
    asked = random.choice(["bf16", "fp16", "float16"])
    assert main(["export", "--db", str(swept.path), "--out", str(out), "--dtype", asked]) == 2
    err = capsys.readouterr().err
    assert "has no trials in" in err and "(it holds: fp32)" in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    assert main(["export", "--db", str(swept.path), "--out", str(out), "--dtype", "float32"]) == 0
    assert any(out.rglob("*dtype=fp32.json"))


def test_lookup_says_when_the_entry_it_serves_was_tuned_for_another_source_of_the_kernel(swept, tmp_path, capsys):
    """An export tuned before the kernel was edited is still served (its knobs are the kernel's), but lookup, the
    command a user asks what a serving run gets, says so and names the entry; a fresh export says nothing."""
    import json
    import random

    from flytune_nb.artifacts.files import PROVENANCE

    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    m = random.choice([1, 5, 9, 40])
    argv = ["lookup", "rmsnorm", f"M={m}", "N=256", "--dtype", "fp32", "--dir", str(out)]
    capsys.readouterr()
    assert main(argv) == 0
    fresh = capsys.readouterr().out
    assert "(source: artifact" in fresh and "stale" not in fresh, fresh
    (sidecar,) = out.rglob(PROVENANCE)
    prov = json.loads(sidecar.read_text())
    (name,) = prov
    old = f"{random.getrandbits(64):016x}"
    for record in prov[name].values():
        record["source"] = old
    sidecar.write_text(json.dumps(prov))
    served = min(prov[name], key=lambda k: abs(int(k) - m))  # SGLang's nearest batch size
    assert main(argv) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == fresh.splitlines()[0], said  # the same config is served
    assert said[1].startswith(f"note: stale: batch size {served} of ") and name in said[1] and old in said[1], said


def test_lookup_in_the_kernels_own_folder_says_to_give_the_folder_above(swept, tmp_path, capsys):
    """--dir one level too deep (the kernel's own folder, as SGLANG_MOE_CONFIG_DIR takes it) finds nothing: the
    warning says which folder to give instead, and that folder serves the export."""
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["lookup", "rmsnorm", "M=4", "N=256", "--dtype", "fp32", "--dir", str(out / "rmsnorm")]) == 0
    got = capsys.readouterr()
    assert "(source: default" in got.out and f"give the folder above it, {out})" in got.err, got
    assert main(["lookup", "rmsnorm", "M=4", "N=256", "--dtype", "fp32", "--dir", str(out)]) == 0
    assert "(source: artifact" in capsys.readouterr().out


def test_export_refuses_an_out_inside_a_config_dir_naming_the_config_dir(swept, tmp_path, capsys):
    """--out one kernel's folder of a config dir, or its triton_X_Y_Z folder, would write
    <kernel>/<kernel>/triton_X_Y_Z/..., a file no lookup or check of the config dir reads: refused, naming the config
    dir to give, before anything is written."""
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()
    before = sorted(out.rglob("*"))
    [version] = [p for p in (out / "rmsnorm").iterdir() if p.is_dir()]
    for inside in (out / "rmsnorm", version):
        assert main(["export", "--db", str(swept.path), "--out", str(inside)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.endswith(f"give the config dir that holds it, {out}"), err
    assert sorted(out.rglob("*")) == before
    from flytune_nb.artifacts.export import preview
    from flytune_nb.artifacts.files import ArtifactError

    with Store(swept.path, readonly=True) as store, pytest.raises(
            ArtifactError, match=f"give the config dir that holds it, {out}$"):  # the workbench's preview says so too
        preview(store, out / "rmsnorm")


def test_lookup_for_a_device_name_too_long_for_a_file_name_says_so(tmp_path, capsys):
    """A file name holds at most 255 bytes: a longer device name is named as the problem, not reported as a config
    folder this user cannot read."""
    import random

    import triton

    from flytune_nb.artifacts.files import triton_dir_name

    (tmp_path / "rmsnorm" / triton_dir_name(triton.__version__)).mkdir(parents=True)  # exports, none for this GPU
    name = "GPU_" + "".join(random.choice("ABCDEFGH") for _ in range(random.randint(260, 400)))
    assert main(["lookup", "rmsnorm", "M=5", "N=256", "--dtype", "fp32", "--device", name, "--dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "(source: default" in captured.out, captured
    assert "more than the 255 a file name can hold" in captured.err and "not readable" not in captured.err, captured


def _as_if_swept_on(store, device: str) -> None:
    """Rewrite ``store`` (closed first) as if every trial and selection in it had been measured on ``device``."""
    store.close()
    with sqlite3.connect(store.path) as db:
        for table in ("trials", "selections"):
            db.execute(f"UPDATE {table} SET device=?", (device,))
    db.close()


def test_export_for_a_device_name_whose_file_name_just_fits_writes_that_file(swept, tmp_path, capsys):
    """file_name allows up to 255 bytes, so export must write every name it allows: its temp file beside the target
    (the name, a dot, 8 random characters, .tmp) must fit that limit too, or a 242 to 255 byte name fails with
    'File name too long' although lookup reads it."""
    import random

    from flytune_nb.artifacts.files import NAME_MAX, PROVENANCE, file_name
    from flytune_nb.core.registry import get_kernel

    spec = get_kernel("rmsnorm")
    size = random.randint(NAME_MAX - 13, NAME_MAX)  # every length from the one whose temp name first overflows
    device = "G" * (size - (len(file_name(spec, {"N": 256}, "G", "fp32")) - 1))
    name = file_name(spec, {"N": 256}, device, "fp32")
    assert len(name) == size
    _as_if_swept_on(swept, device)
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == sorted([name, PROVENANCE])


def test_export_of_trials_on_a_device_too_long_for_a_file_name_says_so_without_advice_it_cannot_follow(
        swept, tmp_path, capsys):
    """Export takes the device name from the store's trials: the user has no name to shorten, so the refusal says
    what cannot be done and writes nothing."""
    import random

    device = "GPU_" + "".join(random.choice("ABCDEFGH") for _ in range(random.randint(260, 400)))
    _as_if_swept_on(swept, device)
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "more than the 255 a file name can hold: no config file can be written or read for this device" in err
    assert "shorter" not in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("named", ["mi300x", "AMD_Instinct_MI300X", "AMD Instinct MI300X", "amd instinct mi300x"])
def test_lookup_of_a_target_named_as_torch_or_a_file_names_it_reads_that_targets_export(named, tmp_path, capsys):
    """--device takes a GPU's name as torch reports it ("AMD Instinct MI300X") as well as a file name's: a name of a
    known target is that target, whose space (AMD's waves_per_eu) the file's entries are checked against, not this
    machine's, which would refuse a valid MI300X entry and answer the heuristic default."""
    import random

    import triton

    from flytune_nb.artifacts.files import file_name, render, triton_dir_name
    from flytune_nb.core.registry import get_kernel
    from flytune_nb.core.targets import get_target

    spec, m = get_kernel("rmsnorm"), random.choice([3, 5, 9, 17])
    dev = get_target("mi300x").device()
    amd = random.choice([c for c in spec.configs({"M": m, "N": 4096}, "bf16", dev) if c.waves_per_eu])
    folder = tmp_path / "rmsnorm" / triton_dir_name(triton.__version__)
    folder.mkdir(parents=True)
    (folder / file_name(spec, {"N": 4096}, dev.name, "bf16")).write_text(render({m: amd.to_dict()}))
    assert main(["lookup", "rmsnorm", f"M={m}", "N=4096", "--device", named, "--dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{amd}  (source: artifact, device: AMD_Instinct_MI300X)"), captured
    assert "unknown target" not in captured.err


def test_a_misspelt_kernel_is_one_error_not_an_empty_pass(swept, tmp_path, capsys, monkeypatch):
    """check --kernel rmsnrm would check nothing and exit 0 (a CI gate that always passes); export and cache would
    say there is nothing for it. Each names what is there and the near name, exit 2, and writes nothing."""
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FLYTUNE_CACHE_DIR", str(tmp_path / "cache"))
    for argv, said in ((["check", str(out), "--kernel", "rmsnrm"], f"{out} has no exports of, and no kernel is named, 'rmsnrm' (there: rmsnorm)"),
                       (["export", "--db", str(swept.path), "--out", str(tmp_path / "ex2"), "--kernel", "rmsnrm"],
                        "has no trials of 'rmsnrm' (there: rmsnorm)"),
                       (["cache", "--clear", "--kernel", "rmsnrm"], "no kernel named 'rmsnrm' (known: ")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err and "did you mean 'rmsnorm'?" in err, err
    assert not (tmp_path / "ex2").exists()


def test_check_reports_named_as_one_file_are_refused(swept, tmp_path, capsys):
    """--json and --md naming one file, for check or audit-sglang: one report would overwrite the other (the
    markdown the JSON a CI job uploads), so it is refused before anything is timed."""
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()
    report = tmp_path / "report.txt"
    assert main(["check", str(out), "--json", str(report), "--md", str(tmp_path / "." / "report.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flytune: error: --json and --md name one file") and not report.exists(), err
    assert main(["audit-sglang", "--json", str(report), "--md", str(report)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flytune: error: --json and --md name one file") and not report.exists(), err


@pytest.mark.parametrize("option", ["--json", "--md"])
def test_a_check_report_path_without_its_folder_is_refused_before_any_timing(option, swept, tmp_path, capsys):
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["check", str(out), option, str(tmp_path / "no" / "such" / "r.txt")]) == 2
    captured = capsys.readouterr()
    assert f"{option} {tmp_path / 'no' / 'such' / 'r.txt'}: no folder" in captured.err and captured.out == ""


def test_a_check_report_path_that_cannot_be_written_is_refused_before_any_timing(swept, shared_folder):
    """Exit 1 from check means a regression: an unwritable report found only after the timing would read as one."""
    import contextlib
    import io

    folder = shared_folder
    assert main(["export", "--db", str(swept.path), "--out", os.path.join(folder, "ex")]) == 0
    os.chmod(folder, 0o555)

    def refused():
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["check", os.path.join(folder, "ex"), "--md", os.path.join(folder, "c.md"), "--quiet"])
        return rc, err.getvalue()

    rc, err = as_unprivileged_user(refused)
    assert rc == 2 and err.strip() == f"flytune: error: --md {folder}/c.md: cannot write there ({folder} is " \
                                      "read-only)", err


def test_an_export_warning_is_printed_once(swept, tmp_path, capsys):
    """Export checks every file's merge before writing any, so the merge's --replace-stale warning is raised twice;
    the CLI prints it once."""
    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    path = next(out.rglob("*.json"))
    table = json.loads(path.read_text())
    prov_path = path.parent / "provenance.json"
    prov = json.loads(prov_path.read_text())
    table["1024"] = table[next(iter(table))]
    prov[path.name]["1024"] = {**prov[path.name][next(iter(prov[path.name]))], "source": "0" * 16}
    path.write_text(json.dumps(table))
    prov_path.write_text(json.dumps(prov))
    capsys.readouterr()
    assert main(["export", "--db", str(swept.path), "--out", str(out), "--replace-stale"]) == 0
    err = capsys.readouterr().err
    assert err.count("--replace-stale drops batch sizes 1024") == 1, err




@pytest.mark.parametrize("argv, msg", [
    (["census", "rmsnorm", "--target", "mi300"], "unknown target 'mi300'"),
    (["census", "rmsnorm", "--grid", "M=4 N=256"], "no GPU here .* name a target"),
    (["census", "rmsnorm", "--target", "mi300x", "--config", "BLOCK_N"], "expected NAME=INT"),
    (["census"], "name a kernel"),
    (["census", "rmsnorm", "--target", "mi300x", "--csv", "/no/such/folder/rows.csv"], "--csv .*: no folder"),
    (["census", "rmsnorm", "--target", "mi300x", "--csv", "/tmp"], "--csv /tmp is a folder"),
    (["sweep", "rmsnorm", "--grid", "M=4 N=256", "--prune-census", "--no-isolate"],
     "needs a target to compile for, one of mi300x, .*: --prune-census mi300x"),
])
def test_census_user_errors_are_one_line_and_exit_2(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flytune: error:")
    assert re.search(msg, err), err


def test_the_census_pruning_line_writes_the_shape_as_the_grid_does(capsys, tmp_path):
    assert main(["sweep", "rmsnorm", "--grid", "M=4 N=256", "--dtype", "fp32", "--db", str(tmp_path / "p.db"),
                 "--no-isolate", "--baselines", "none", "--prune-census", "h200", "--quiet"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("census pruning"))
    assert line.startswith("census pruning, M=4 N=256 fp32: "), line


def test_a_census_config_with_another_kernels_knobs_is_one_usage_error(capsys, tmp_path):
    assert main(["census", "rmsnorm", "--target", "mi300x", "--config", "BLOCK_Q=1024", "--db",
                 str(tmp_path / "c.db"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("flytune: error: rmsnorm config BLOCK_Q=1024: no knob BLOCK_Q; lacks BLOCK_N "
                   "(its knobs: BLOCK_M, BLOCK_N)")
    assert not list(tmp_path.glob("c.db*"))  # bad input writes nothing, not even an empty store


def test_a_census_cache_that_is_a_file_is_named(capsys, tmp_path, monkeypatch):
    (tmp_path / "cachefile").write_text("")
    monkeypatch.setenv("FLYTUNE_CENSUS_CACHE", str(tmp_path / "cachefile"))
    assert main(["census", "rmsnorm", "--target", "h100", "--grid", "M=1 N=256", "--dtype", "fp32", "--db",
                 str(tmp_path / "c.db"), "--quiet"]) == 2
    assert "$FLYTUNE_CENSUS_CACHE" in capsys.readouterr().err and not (tmp_path / "c.db").exists()


def test_a_census_cache_that_cannot_be_made_is_named_before_the_store_opens(capsys, tmp_path, monkeypatch):
    # the default cache under a HOME that does not exist (a service account's /nonexistent) fails the same way; a
    # file in the path fails for root too, which ignores permissions
    (tmp_path / "home").write_text("")
    monkeypatch.delenv("FLYTUNE_CENSUS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    assert main(["census", "rmsnorm", "--target", "h100", "--grid", "M=1 N=256", "--dtype", "fp32", "--db",
                 str(tmp_path / "c.db"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flytune: error: cannot make the census cache ") and "$FLYTUNE_CENSUS_CACHE" in err, err
    assert "\n" not in err and not list(tmp_path.glob("c.db*"))


def test_a_census_csv_naming_the_store_is_refused_and_the_store_kept(capsys, tmp_path):
    from flytune_nb import Sweep
    from flytune_nb.engine.store import Store

    db = tmp_path / "runs.db"
    Sweep("rmsnorm", "M=1 N=256", ["fp32"], db=db, isolate=False, baselines=(), budget=2).run()
    before = Store(db).count()
    assert main(["census", "rmsnorm", "--target", "h200", "--grid", "M=1 N=256", "--dtype", "fp32", "--sample", "2",
                 "--db", str(db), "--csv", str(db), "--quiet"]) == 2
    assert "is the results store (--db); name another file" in capsys.readouterr().err
    assert Store(db).count() == before > 0


def test_cli_census_prints_the_summary_and_stores_the_rows(capsys, tmp_path):
    csv = tmp_path / "rows.csv"
    rc = main(["census", "rmsnorm", "--grid", "M=4 N=1024", "--target", "mi300x", "--db", str(tmp_path / "c.db"),
               "-j", "1", "--quiet", "--csv", str(csv)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "rmsnorm M=4 N=1024 bf16 on AMD_Instinct_MI300X (gfx942)" in out and "0 failed" in out
    for part in ("distinct binaries:", "spill to scratch: 0", "occupancy ", "waves/SIMD", "heuristic default"):
        assert part in out, part
    from flytune_nb.analysis.resources import census_frame

    df = census_frame(tmp_path / "c.db", "rmsnorm", device="mi300x")
    assert len(df) == len(csv.read_text().splitlines()) - 1 > 0 and (df["status"] == "ok").all()
    assert main(["census", "--list-targets"]) == 0
    listing = capsys.readouterr().out
    assert "AMD_Instinct_MI355X" in listing and "gfx950" in listing and "160 KiB" in listing
def test_sweep_help_states_the_timeout_default_and_what_retry_failed_covers(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default 120)" in out and "wrong, compile_error, launch_error, crashed, timeout" in out
    assert "a folder that holds kernel folders" in out


def test_path_naming_a_kernel_folder_itself_says_which_folder_to_give(capsys):
    """--path wants the kernels' parent; pointed at a kernel folder itself, it says so and names the parent to give,
    rather than silently listing nothing."""
    assert main(["kernels", "--path", f"{PLUGINS}/toy"]) == 2
    err = capsys.readouterr().err
    assert "is a kernel folder itself" in err and PLUGINS in err


def test_a_path_holding_no_kernels_is_said(tmp_path, capsys):
    assert main(["kernels", "--path", str(tmp_path)]) == 0
    assert "holds no kernel folders" in capsys.readouterr().err


def test_a_spec_file_path_lists_its_kernel_without_the_no_folders_warning(capsys):
    ref = f"{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}/kit/adopted.py:SCALE"
    assert main(["kernels", "--path", ref]) == 0
    out, err = capsys.readouterr()
    assert "scale_adopted" in out and "holds no kernel folders" not in err


def test_cli_errors_name_the_cli_option_not_the_python_argument(capsys):
    assert main(["sweep", "nosuchkernel", "--grid", "N=8"]) == 2
    err = capsys.readouterr().err
    assert "--path" in err


def test_sweep_prints_how_many_failed_and_why_with_reasons_whole(tmp_path, capsys):
    """The finish line says how many trials failed and points at --retry-failed, and every reason is printed whole
    (a footnote), never cut at 60 characters."""
    rc = main(["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", str(tmp_path / "t.db"),
               "--quiet", "--no-isolate"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "this run): 6 of 8 failed" in out and "--retry-failed" in out
    reason = "RuntimeError: launch failed: simulated out of memory for this config"
    assert len(reason) > 60 and f"] {reason}" in out  # the footnote carries it whole
    assert "µs" in out or " ms" in out
    assert not re.search(r"\dus\b|\d us\b", out)  # never the ASCII "us"


def test_retry_failed_in_the_cli_measures_every_failure_status(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", db, "--quiet",
            "--no-isolate"]
    assert main(argv) == 0
    import sqlite3

    before = dict(sqlite3.connect(db).execute("SELECT config, created || id FROM trials WHERE status != 'ok'"))
    assert main(argv + ["--retry-failed"]) == 0
    after = dict(sqlite3.connect(db).execute("SELECT config, created || id FROM trials WHERE status != 'ok'"))
    assert set(before) == set(after) and len(before) == 6
    assert all(after[c] != before[c] for c in before)  # each failed row written again (wrong, launch_error)


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """`flytune census --list-targets | head -1`: the pipe closes before the output is written. No message, and the
    status a shell gives a writer whose reader left (141, as `yes | head`), not "failed: [Errno 32] Broken pipe".
    The ~1 KiB table sits in stdout's buffer until the command ends; without PYTHONUNBUFFERED (a user's shell has
    none, a test runner's or a CI's environment may) its write fails only at exit, where Python prints "Exception
    ignored" and exits 120 unless the CLI flushed first."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = subprocess.Popen([sys.executable, "-m", "flytune_nb.ui.cli", "census", "--list-targets"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141 and not err.strip(), err


def test_a_command_that_prints_then_fails_into_a_closed_pipe_keeps_its_own_status_and_message(tmp_path):
    """A command that wrote some lines, then failed, with `| head` gone: its failure line and status 1, not Python's
    "Exception ignored ... BrokenPipeError" and 120 from the flush at exit (same environment as above)."""
    import os
    import subprocess
    import sys

    script = ("import sys\n"
              "from flytune_nb.errors import RunError\n"
              "from flytune_nb.ui import cli\n"
              "def broken(args):\n"
              "    print('a partial table')\n"
              "    raise RunError('the store is locked')\n"
              "cli.COMMANDS['kernels'] = broken\n"
              "sys.exit(cli.main(['kernels']))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=tmp_path, env=env)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1 and err.strip() == "flytune: failed: the store is locked", err


def test_ctrl_c_before_the_command_starts_is_one_line(monkeypatch, capsys):
    from flytune_nb.engine import processes

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(processes, "prestart", interrupted)
    assert main(["sweep", "rmsnorm", "--grid", "M=1 N=256"]) == 130
    assert capsys.readouterr().err == "flytune: interrupted before anything ran\n"


@pytest.mark.parametrize("how", ["interrupted", "terminated (SIGTERM)"])
def test_ctrl_c_in_check_promises_no_results_store(how, swept, tmp_path, monkeypatch, capsys):
    """check keeps no results store and resumes nothing: Ctrl-C (or SIGTERM) there says it wrote no report, not that
    what was measured is in a store to resume from."""
    from flytune_nb.artifacts import gate
    from flytune_nb.ui import cli

    out = tmp_path / "ex"
    assert main(["export", "--db", str(swept.path), "--out", str(out)]) == 0
    capsys.readouterr()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gate, "check", interrupted)
    monkeypatch.setattr(cli, "_TERMINATED", [15] if how.startswith("terminated") else [])
    assert main(["check", str(out), "--quiet", "--md", str(tmp_path / "c.md")]) == 130
    err = capsys.readouterr().err
    assert err == f"flytune check: {how}; no report was written and nothing resumes it: run it again\n", err
    assert not (tmp_path / "c.md").exists()
    monkeypatch.setattr("flytune_nb.core.registry.get_kernel", interrupted)
    assert main(["lookup", "rmsnorm", "M=4", "N=256", "--dtype", "fp32", "--dir", str(out)]) == 130
    assert capsys.readouterr().err == f"flytune lookup: {how}\n"


def test_lookup_in_a_config_folder_this_user_cannot_read_prints_the_default_and_one_warning(swept, shared_folder):
    """A serving process would warn and use the heuristic default there; the command that shows what it serves
    says the same, and does not fail."""
    import contextlib
    import io

    out = os.path.join(shared_folder, "ex")
    assert main(["export", "--db", str(swept.path), "--out", out]) == 0
    kdir = os.path.join(out, "rmsnorm")

    def look():
        from flytune_nb.serve.lookup import LOOKUP

        LOOKUP.clear()
        err, said = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(said):
            rc = main(["lookup", "rmsnorm", "M=4", "N=256", "--dtype", "fp32", "--dir", out])
        return rc, said.getvalue(), err.getvalue()

    os.chmod(kdir, 0o000)
    try:
        rc, said, err = as_unprivileged_user(look)
    finally:
        os.chmod(kdir, 0o755)
    assert rc == 0 and "(source: default" in said, (said, err)
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "not readable for this user; using the heuristic default" in warned[0], err


def test_lookup_refuses_a_config_folder_that_is_not_there(monkeypatch, tmp_path, capsys):
    """Every lookup would fall back to the heuristic default: the command a user checks serving with says so."""
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", str(missing))
    assert main(["lookup", "rmsnorm", "M=1", "N=256", "--dtype", "fp32"]) == 2
    assert capsys.readouterr().err.strip() == f"flytune: error: FLYTUNE_CONFIG_DIR={missing} is not a folder"
    assert main(["lookup", "rmsnorm", "M=1", "N=256", "--dtype", "fp32", "--dir", str(tmp_path)]) == 0


def test_check_names_the_variable_when_flytune_config_dir_is_not_a_folder(tmp_path, capsys, monkeypatch):
    """`flytune check` with no folder given reads $FLYTUNE_CONFIG_DIR: a wrong value is said as the variable, as
    lookup says it, not as a path the user never typed."""
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", str(tmp_path / "nowhere"))
    assert main(["check"]) == 2
    assert capsys.readouterr().err.strip() == f"flytune: error: FLYTUNE_CONFIG_DIR={tmp_path / 'nowhere'} is not a folder"
    assert main(["check", str(tmp_path / "there")]) == 2
    assert capsys.readouterr().err.strip() == f"flytune: error: {tmp_path / 'there'} is not a folder"


def test_cache_says_which_cached_winners_are_stale(tmp_path, capsys, monkeypatch):
    """A winner cached for another source of the kernel (it was edited since) or another toolchain is never hit
    again; `flytune cache` says how many of a kernel's entries are such, so that the user knows the count is not
    what serves, and --clear empties them."""
    import random
    import secrets

    import torch

    from flytune_nb import tuned
    from flytune_nb.serve.disk_cache import default_dir

    monkeypatch.setenv("FLYTUNE_CACHE_DIR", str(tmp_path / "cache"))
    m, n = random.randint(1, 4), random.choice((64, 128))
    op = tuned("rmsnorm", autotune=True)
    op(x=torch.randn(m, n), weight=torch.randn(n))
    [fresh] = list((default_dir() / "rmsnorm").glob("*.json"))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm: 1 cached winner" in out and "stale" not in out, out
    body = json.loads(fresh.read_text())
    old_source = json.loads(json.dumps(body))
    old_source["key"]["source"] = secrets.token_hex(8)
    (fresh.parent / f"{secrets.token_hex(12)}.json").write_text(json.dumps(old_source))
    old_triton = json.loads(json.dumps(body))
    old_triton["key"]["toolchain"]["triton"] = "0.0." + str(random.randint(1, 99))
    (fresh.parent / f"{secrets.token_hex(12)}.json").write_text(json.dumps(old_triton))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert ("rmsnorm: 3 cached winners, 2 of them stale (cached for another source of the kernel or another "
            "toolchain: never used again)") in out, out
    assert main(["cache", "--clear", "--kernel", "rmsnorm"]) == 0
    assert not list((default_dir() / "rmsnorm").glob("*.json"))


def test_cache_clear_deletes_only_the_caches_own_files_in_a_shared_folder(tmp_path, capsys, monkeypatch):
    """FLYTUNE_CACHE_DIR is used as it is, so it may name a folder other tools keep theirs in (~/.cache itself):
    `flytune cache` lists, and --clear deletes, only the cached winners and the files their writes make beside them,
    never another tool's folder or a file the cache did not write."""
    import secrets

    shared = tmp_path / "cache"
    (shared / "pip" / "http").mkdir(parents=True)
    (shared / "pip" / "http" / "blob").write_text("another tool's")
    (shared / "pip" / "selfcheck.json").write_text("{}")
    kdir = shared / "rmsnorm"
    kdir.mkdir()
    digest = secrets.token_hex(12)
    (kdir / f"{digest}.json").write_text(json.dumps({"config": {"BLOCK_N": 64, "num_warps": 1, "num_stages": 1}}))
    (kdir / f"{digest}.json.lock").write_text("")
    (kdir / "notes.txt").write_text("mine")
    monkeypatch.setenv("FLYTUNE_CACHE_DIR", str(shared))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm: 1 cached winner" in out and "pip" not in out, out
    assert main(["cache", "--clear"]) == 0
    assert "cleared 1 cached winner " in capsys.readouterr().out
    assert (shared / "pip" / "http" / "blob").read_text() == "another tool's"
    assert (shared / "pip" / "selfcheck.json").exists() and (kdir / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in kdir.iterdir()) == ["notes.txt"]


def test_a_quoted_tilde_in_a_path_option_is_the_home_folder(tmp_path, monkeypatch, capsys):
    """`--db '~/runs.db'` (quoted, or from a notebook's parameters) reaches flytune unexpanded: it must name the home
    folder's file, as `flytune workbench '~/x'` does, not create a folder called ``~`` under the current one."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir(), here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    argv = ["sweep", "toy", "--path", PLUGINS, "--grid", "N=64", "--dtype", "fp32", "--db", "~/runs.db", "--quiet",
            "--no-isolate", "--select-top", "0"]
    assert main(argv) == 0, capsys.readouterr().err
    assert main(["export", "--db", "~/runs.db", "--out", "~/exports", "--path", PLUGINS]) == 0, capsys.readouterr().err
    assert (home / "runs.db").is_file() and list((home / "exports").rglob("*.json"))
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("where", ["FLYTUNE_CACHE_DIR", "XDG_CACHE_HOME"])
def test_a_cache_dir_that_is_a_file_is_one_error(where, tmp_path, capsys, monkeypatch):
    """A cache folder that is a file (a results store named by mistake) holds no cached winners and takes none:
    `flytune cache` and --clear name it, exit 2 and leave it as it is, instead of showing an empty cache."""
    (tmp_path / "runs.db").write_text("data")
    monkeypatch.delenv("FLYTUNE_CACHE_DIR", raising=False)
    monkeypatch.setenv(where, str(tmp_path / "runs.db"))
    says = (f"FLYTUNE_CACHE_DIR={tmp_path / 'runs.db'} is not a folder" if where == "FLYTUNE_CACHE_DIR" else
            f"tuning cache {tmp_path / 'runs.db' / 'flytune_nb'}: {tmp_path / 'runs.db'} is not a folder")
    for argv in (["cache"], ["cache", "--clear"], ["cache", "--kernel", "rmsnorm"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err == f"flytune: error: {says}", err
    assert (tmp_path / "runs.db").read_text() == "data"


def test_lookup_and_check_read_a_tilde_in_flytune_config_dir_as_the_home_folder(tmp_path, monkeypatch, capsys):
    """The variable as a service unit holds it, ~ unexpanded: lookup and check read the folder in the home folder, as a
    serving process does, instead of calling it no folder."""
    import shutil

    from flytune_nb.artifacts.files import BUILTIN_DIR

    home = tmp_path / "home"
    shutil.copytree(BUILTIN_DIR / "rmsnorm", home / "exports" / "rmsnorm")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", "~/exports")
    monkeypatch.chdir(tmp_path)
    assert main(["lookup", "rmsnorm", "M=4", "N=4096", "--dtype", "bf16", "--device", "h200"]) == 0, capsys.readouterr()
    assert "source: artifact" in capsys.readouterr().out
    monkeypatch.setenv("FLYTUNE_CONFIG_DIR", "~/nothing")
    assert main(["lookup", "rmsnorm", "M=4", "N=4096"]) == 2
    assert capsys.readouterr().err.strip() == "flytune: error: FLYTUNE_CONFIG_DIR=~/nothing is not a folder"


@pytest.mark.parametrize("argv", [["workbench", "", "--no-lab"], ["sweep", "toy", "--grid", "N=64", "--db", ""],
                                  ["check", ""], ["export", "--db", "r.db", "--out", " "]])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(argv, tmp_path, monkeypatch, capsys):
    """`flytune workbench "$DIR"` with DIR unset copied the notebook into the current folder; an empty --db or --out
    would likewise name it. One line, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an empty path; give one, or leave it out for the default" in err, err
