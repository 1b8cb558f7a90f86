import shutil

import pytest

from flytune_nb.core.registry import (
    PARTS,
    KernelNotFound,
    RegistryError,
    get_kernel,
    list_kernels,
)
from tests.conftest import PLUGINS


def test_builtin_kernels_are_found_and_have_every_part():
    names = list_kernels()
    assert {"rmsnorm", "fused_add_rmsnorm"} <= set(names)
    from flytune_nb.core.registry import discover
    from flytune_nb.errors import KernelUnavailable

    folders = discover()
    for name in names:
        assert all((folders[name] / p).exists() for p in PARTS)
        try:
            spec = get_kernel(name)
        except KernelUnavailable:  # an optional dependency (flydsl) is not installed here
            continue
        assert spec.name == name and spec.source_dir == folders[name].resolve()


def test_user_folders_by_env_and_by_argument(monkeypatch):
    assert "toy" not in list_kernels()
    assert "toy" in list_kernels([PLUGINS])
    monkeypatch.setenv("FLYTUNE_KERNEL_PATH", PLUGINS)
    assert get_kernel("toy").axes == ("N",)


def test_unknown_kernel_suggests_the_closest():
    with pytest.raises(KernelNotFound, match="unknown kernel 'rms_norm'.*Did you mean 'rmsnorm'"):
        get_kernel("rms_norm")


def test_missing_parts_and_bad_paths_are_explained(tmp_path):
    broken = tmp_path / "half"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "kernel.py").write_text("")
    with pytest.raises(RegistryError, match="lacks configs.py, heuristic.py, reference.py"):
        get_kernel("half", [tmp_path])
    with pytest.raises(RegistryError, match="not a folder"):
        list_kernels([tmp_path / "nope"])


def test_one_folder_given_as_text_or_a_path_is_one_folder_not_its_characters(tmp_path):
    from pathlib import Path

    from flytune_nb.engine.sweep import Sweep

    assert "toy" in list_kernels(PLUGINS) and "toy" in list_kernels(Path(PLUGINS))
    assert get_kernel("toy", PLUGINS).axes == ("N",)
    assert Sweep("toy", "N=64", ["fp32"], db=":memory:", paths=PLUGINS, isolate=False).paths == (PLUGINS,)
    missing = str(tmp_path / "nope")
    with pytest.raises(RegistryError, match=f"kernel path {missing} is not a folder"):
        list_kernels(missing)


def test_a_name_defined_twice_is_an_error(tmp_path):
    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "toy")
    with pytest.raises(RegistryError, match="defined twice"):
        list_kernels([PLUGINS, tmp_path])


def test_spec_name_must_match_folder(tmp_path):
    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "toy2")
    with pytest.raises(RegistryError, match="SPEC.name is 'toy' but the folder is 'toy2'"):
        get_kernel("toy2", [tmp_path])


def test_a_kernel_missing_an_optional_dependency_is_listed_as_unavailable_not_broken(tmp_path, capsys):
    import shutil

    from flytune_nb.errors import KernelUnavailable
    from flytune_nb.ui.cli import main
    from tests.conftest import PLUGINS

    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "needs_lib")
    init = tmp_path / "needs_lib" / "__init__.py"
    init.write_text("from flytune_nb.kit import KernelUnavailable\n"
                    "raise KernelUnavailable(\"needs somelib: pip install 'flytune_nb[somelib]'\")\n")
    with pytest.raises(KernelUnavailable, match=r"needs_lib: needs somelib"):
        get_kernel("needs_lib", [str(tmp_path)])
    assert main(["kernels", "--path", str(tmp_path)]) == 0  # unavailable is not broken
    out = capsys.readouterr().out
    assert "needs_lib" in out and "unavailable: needs somelib: pip install 'flytune_nb[somelib]'" in out


def test_a_kernel_path_this_user_cannot_read_is_a_problem_named_not_an_oserror(tmp_path, monkeypatch):
    """A FLYTUNE_KERNEL_PATH from a shared shell profile may name another user's folder: stat answers EACCES there.
    (Raised by a patched stat: these tests may run as root, which reads every folder.)"""
    import os
    import pathlib

    from flytune_nb.core.registry import drop_unusable_env_paths, search_path

    locked = tmp_path / "alice" / "kernels"
    real_stat = pathlib.Path.stat

    def stat(self, *a, **k):
        if str(self).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    monkeypatch.setenv("FLYTUNE_KERNEL_PATH", os.pathsep.join([str(locked), PLUGINS]))
    with pytest.raises(RegistryError, match=f"kernel path {locked} cannot be read .Permission denied."):
        search_path()
    problems = drop_unusable_env_paths()
    assert len(problems) == 1 and "cannot be read" in problems[0] and os.environ["FLYTUNE_KERNEL_PATH"] == PLUGINS


def test_a_folders_shape_rules_file_is_read_and_keeps_its_source_fingerprint(tmp_path):
    """shape_rules.json beside the parts adds rules to the folder's spec without changing its source fingerprint
    (the tuning key of its stored trials and exports); a file that is not an object of rules is one RegistryError
    naming it."""
    import json

    from flytune_nb.errors import UsageError

    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "toy")
    before = get_kernel("toy", [str(tmp_path)]).fingerprint
    rules = tmp_path / "toy" / "shape_rules.json"
    rules.write_text(json.dumps({"N >= 32": "one warp's row"}))
    spec = get_kernel("toy", [str(tmp_path)])
    assert spec.shape_rules == {"N >= 32": "one warp's row"} and spec.fingerprint == before
    with pytest.raises(UsageError, match=r"^toy: shape N=16 breaks the rule N >= 32: one warp's row$"):
        spec.check_shape({"N": 16})
    rules.write_text(json.dumps({"N >= 8": "a row of eight"}))  # edited in place: the next load reads it
    assert get_kernel("toy", [str(tmp_path)]).shape_rules == {"N >= 8": "a row of eight"}
    rules.write_text(json.dumps(["N >= 32"]))
    with pytest.raises(RegistryError, match=r"shape_rules\.json: must hold one object of rule -> reason"):
        get_kernel("toy", [str(tmp_path)])
    rules.write_text(json.dumps({"K >= 32": "no such axis"}))
    with pytest.raises(RegistryError, match=r"shape_rules\.json: toy: shape rule 'K >= 32' names 'K'"):
        get_kernel("toy", [str(tmp_path)])


def test_a_module_that_exits_while_imported_is_one_error_naming_it(tmp_path, capsys):
    """A script named to adopt from that parses its arguments or calls sys.exit at import raises SystemExit, which
    is no Exception: it ended the command with the script's exit code and nothing said, or with argparse's usage
    line for flytune's own arguments. A kernel folder doing it hid every other kernel from `flytune kernels`."""
    from flytune_nb.ui.cli import main

    script = tmp_path / "my_script.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args(['--no-such'])\n")
    with pytest.raises(RegistryError, match=r"my_script.py exited while being imported \(SystemExit: 2\).*"
                                            r"if __name__ == '__main__'"):
        get_kernel(f"{script}:SPEC")
    capsys.readouterr()
    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "kernels" / "quits")
    (tmp_path / "kernels" / "quits" / "__init__.py").write_text("import sys\nsys.exit(3)\n")
    shutil.copytree(f"{PLUGINS}/toy", tmp_path / "kernels" / "toy")
    with pytest.raises(RegistryError, match=r"quits.* exited while being imported \(SystemExit: 3\)"):
        get_kernel("quits", [str(tmp_path / "kernels")])
    assert main(["kernels", "--path", str(tmp_path / "kernels")]) == 1  # a broken kernel is listed as one
    out = capsys.readouterr().out
    assert "\ntoy " in out and "ERROR: kernel folder" in out and "exited while being imported" in out, out


def test_a_tilde_in_a_kernel_path_is_the_home_folder(tmp_path, monkeypatch):
    """paths= from a notebook's parameters (the batch notebook's report cell passes its own) or a quoted --path reach
    the registry with ``~`` unexpanded: it must find the kernels in the home folder, not refuse a folder called ~."""
    import shutil

    from flytune_nb.core.registry import get_kernel, kernel_paths

    home = tmp_path / "home"
    shutil.copytree(PLUGINS, home / "kernels")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert kernel_paths("~/kernels") == [str(home / "kernels")]
    assert get_kernel("toy", "~/kernels").name == "toy"
    monkeypatch.setenv("FLYTUNE_KERNEL_PATH", "~/kernels")
    assert get_kernel("toy").name == "toy"
