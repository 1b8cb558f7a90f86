"""SGLang's fused-MoE config files as SGLang itself names, finds and writes them (SGLang 0.5.23:
sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py and its tuner,
benchmark/kernels/fused_moe_triton/common_utils.py). Nothing here imports SGLang: the shipped folder is found from
the installed package's location, so listing it costs no SGLang import.

- name: ``E=<E>,N=<N>,device_name=<torch.cuda.get_device_name() with spaces as _>`` then ``,dtype=<d>`` when the
  weights are quantised (none for bf16/fp16), ``,block_shape=[n, k]`` when set and non-zero,
  ``,per_channel_quant=True``, then ``_down`` for a separately tuned down GEMM, ``.json``. E is the experts of one
  rank and N the intermediate size of one rank (w2.shape[2]), not the model's totals (docs/sglang.md);
- folder: ``<root>/configs/triton_<X_Y_Z>/`` where root is ``$SGLANG_MOE_CONFIG_DIR`` or SGLang's own package folder;
  the running Triton's folder first, then every other ``triton_*`` folder newest first (SGLang logs a warning);
  a root without ``configs/`` makes SGLang raise FileNotFoundError;
- bytes: ``json.dump(table, indent=4)`` plus one newline, batch sizes ascending, each entry's knobs in
  KNOB_ORDER (SGLang's ``sort_config``), then ``waves_per_eu`` and ``USE_TMA`` when present;
- lookup: the batch size nearest to M (``min(keys, key=abs(k - M))``: a tie goes to the first in the file, the
  smaller).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from flytune_nb.artifacts.files import ArtifactError, compose_name
from flytune_nb.errors import UsageError

KNOB_ORDER = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages",
              "waves_per_eu", "USE_TMA")
# The batch sizes SGLang's tuner measures by default (common_utils.get_default_batch_sizes).
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
# Where SGLang's own files live inside the installed package.
PACKAGE_CONFIGS = ("srt", "layers", "moe", "moe_runner", "triton_utils")


def config_dtype(dtype: str) -> str | None:
    """The ``dtype=`` part SGLang names for one of flytune's dtype names (its ``get_config_dtype_str``): none for the
    unquantised bf16/fp16, ``fp8_w8a8`` for fp8."""
    return "fp8_w8a8" if dtype == "fp8" else None


def file_name(E: int, N: int, device_name: str, dtype: str | None = None, block_shape=None,
              per_channel_quant: bool = False, down: bool = False) -> str:
    """SGLang's name for a fused-MoE config file (get_config_file_name), the rule in this module's docstring, written
    by the artifacts' one name writer (artifacts.files.compose_name): an export through files.file_name names the
    same file."""
    parts = {}
    if dtype:
        parts["dtype"] = dtype
    if block_shape and all(block_shape):
        parts["block_shape"] = str(list(block_shape))  # a list's repr, with its space: [128, 128]
    if per_channel_quant:
        parts["per_channel_quant"] = "True"
    return compose_name({"E": E, "N": N}, device_name.replace(" ", "_"), parts, "_down" if down else "")


# the device as torch names it, spaces made "_", which may itself hold "," or "="
NAME = re.compile(r"^E=(\d+),N=(\d+),device_name=(.+?)((?:,[a-z_]+=[^,]+?|,block_shape=\[\d+, \d+\])*)"
                  r"(_down)?\.json$")


def parse_name(name: str) -> dict | None:
    """{"E", "N", "device", "dtype", "block_shape", "per_channel_quant", "down"}, or None for another file."""
    m = NAME.match(name)
    if not m:
        return None
    rest = m.group(4)
    dtype = re.search(r",dtype=([^,]+?)(?=,|$)", rest)
    block = re.search(r",block_shape=\[(\d+), (\d+)\]", rest)
    return {"E": int(m.group(1)), "N": int(m.group(2)), "device": m.group(3),
            "dtype": dtype.group(1) if dtype else None,
            "block_shape": [int(block.group(1)), int(block.group(2))] if block else None,
            "per_channel_quant": ",per_channel_quant=True" in rest, "down": bool(m.group(5))}


def version_dir(version: str) -> str:
    """SGLang's folder name for a Triton version: every '.' replaced, local suffix kept (``3.6.0+git1`` ->
    ``triton_3_6_0+git1``; flytune's own exports drop the suffix, artifacts.files.triton_dir_name)."""
    return "triton_" + version.replace(".", "_")


def _version_of(folder: str) -> str:
    """The Triton version SGLang reads from a ``triton_*`` name under configs/: every '_' after the prefix made '.'
    (``triton_3_5_0`` and ``triton_3.5.0`` are both 3.5.0; it then reads the folder ``version_dir`` spells)."""
    return folder.removeprefix("triton_").replace("_", ".")


def _version_key(folder: str) -> tuple | None:
    """SGLang sorts the folders by int() of each dotted part of ``_version_of``; a name it cannot parse makes it
    raise."""
    try:
        return tuple(int(x) for x in _version_of(folder).split("."))
    except ValueError:
        return None


def package_root() -> Path | None:
    """The folder SGLang reads when SGLANG_MOE_CONFIG_DIR is unset (its ``configs/`` is inside), or None when sglang
    is not installed."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*PACKAGE_CONFIGS)


def shipped_entry(shape, device_name: str, *, down: bool = False, triton_version: str | None = None,
                  dtype: str | None = None):
    """(Config, path, batch size) of the entry SGLang's own config folder has for this shape (E, N, M) on the device
    named ``device_name`` (``triton_version``'s folder, by default the running Triton's, else the newest that has the
    file, as SGLang looks), or None; ``dtype``: the file name's dtype part (``fp8_w8a8``; None: unquantised). Reads
    files only: SGLang's code is never imported."""
    from flytune_nb.core.config import Config

    if triton_version is None:
        import triton

        triton_version = triton.__version__
    root = package_root()
    if root is None:
        return None
    name = file_name(shape["E"], shape["N"], device_name, dtype, down=down)
    try:
        path, _ = resolve(root, name, triton_version)
        if path is None:
            return None
        table = read_table(path)
    except ArtifactError:
        return None
    m = nearest(table, shape["M"])
    knobs = {k: v for k, v in table[m].items() if k != "USE_TMA"}
    return Config.from_dict(knobs), path, m


def served_instead(spec, shape, dtype: str, device) -> tuple | None:
    """(Config, path, batch size) that a SGLang server started without SGLANG_MOE_CONFIG_DIR runs at this shape, read
    from the file of this kernel's own name in SGLang's package (the up table of sglang_fused_moe, the ``…_down``
    table of its down GEMM), or None: SGLang ships no such file, or the kernel does not write SGLang's fused-MoE
    files. A ``_down`` entry runs with the BLOCK_SIZE_M of the up config that server runs (both GEMMs read one
    alignment; SGLang overrides a mismatch): the down kernel's default, which is that up config, read from SGLang's
    package as such a server reads it.

    The kernel is recognised by its renderer, not by a field of its spec, as export's _warn_shipped is: a field added
    in the kernel's folder would change its tuning key and leave every stored trial of it to be measured again."""
    from flytune_nb.artifacts import files as artifact_files
    from flytune_nb.core.config import Config

    root = package_root()
    if spec.artifact_render is not render or root is None:
        return None
    import triton

    rest = {a: v for a, v in shape.items() if a != spec.batch_axis}
    try:
        name = artifact_files.file_name(spec, rest, device.name, dtype)
    except ArtifactError:  # a device name no file can carry: lookup has said so already
        return None
    found = shipped_file(name, triton.__version__)
    if found is None:
        return None
    path, table = found
    m = nearest(table, shape[spec.batch_axis])
    try:
        config = Config.from_dict({k: v for k, v in table[m].items() if k != "USE_TMA"})
    except ValueError:  # an entry SGLang could not run either: nothing to name
        return None
    if parse_name(name)["down"]:
        with serving_from(root):
            config = config.replace(BLOCK_SIZE_M=spec.default(shape, dtype, device)["BLOCK_SIZE_M"])
    return config, path, m


def shipped_file(name: str, triton_version: str) -> tuple[Path, dict[int, dict]] | None:
    """(path, {M: knobs}) of the file named ``name`` that SGLang's own package folder serves under ``triton_version``
    (its folder, else the newest that has the file, as SGLang looks), or None: sglang not installed, no such file, or
    one SGLang could not read either. Reads files only."""
    root = package_root()
    if root is None:
        return None
    try:
        path, _ = resolve(root, name, triton_version)
        return (path, read_table(path)) if path is not None else None
    except ArtifactError:
        return None


# Set by ``serving_from`` for the length of an audit: the root a server under audit would read.
_AUDITED_ROOT: ContextVar[Path | None] = ContextVar("sglang_audited_root", default=None)


def serving_root() -> Path | None:
    """The folder a SGLang server started now would read: $SGLANG_MOE_CONFIG_DIR, else its package folder (within
    ``serving_from(root)``: ``root``)."""
    audited = _AUDITED_ROOT.get()
    if audited is not None:
        return audited
    env = os.environ.get("SGLANG_MOE_CONFIG_DIR")
    return Path(env) if env else package_root()


@contextmanager
def serving_from(root: Path):
    """Within: ``serving_root()`` is ``root``. An audit of a config folder asks what a server started with
    ``SGLANG_MOE_CONFIG_DIR=root`` runs, and such a server pins its down GEMM's BLOCK_SIZE_M to the up file in
    ``root``, not in whatever folder this process's environment names."""
    token = _AUDITED_ROOT.set(Path(root))
    try:
        yield
    finally:
        _AUDITED_ROOT.reset(token)


def lookup_as_served(spec, shape: dict, dtype: str, device, directory=None) -> tuple:
    """(config, source, the BLOCK_SIZE_M a down entry said where SGLang runs it with another, else None): the export
    lookup's answer (serve/lookup.lookup), as a server started with SGLANG_MOE_CONFIG_DIR at the looked-up folder runs
    it where ``directory`` holds a SGLang MoE folder: its down GEMM reuses that folder's up table when it has no _down
    file, and runs a _down entry with that folder's up BLOCK_SIZE_M (both GEMMs share one alignment), whatever this
    process's SGLANG_MOE_CONFIG_DIR names. Any other kernel: the lookup's answer as it is."""
    from contextlib import nullcontext

    from flytune_nb.artifacts.files import kernel_dir
    from flytune_nb.serve.lookup import config_dir, lookup

    served = kernel_dir(spec, config_dir(directory)).parent  # its files sit in <SGLANG_MOE_CONFIG_DIR>/configs/
    sglang_folder = spec.artifact_render is render and (served / "configs").is_dir()
    if sglang_folder:
        import triton

        # this lookup reads the folder as flytune does; a server may fail on it before it reads any file
        resolve(served, file_name(shape["E"], shape["N"], device.name, config_dtype(dtype),
                                  down=spec.artifact_suffix == "_down"), triton.__version__)
    with serving_from(served) if sglang_folder else nullcontext():
        config, source = lookup(spec, shape, dtype, device=device, directory=directory)
        if sglang_folder and source == "artifact" and spec.artifact_suffix == "_down":
            up_m = spec.default(shape, dtype, device)["BLOCK_SIZE_M"]
            if config["BLOCK_SIZE_M"] != up_m:
                return config.replace(BLOCK_SIZE_M=up_m), source, config["BLOCK_SIZE_M"]
    return config, source, None


class UnreadableVersionFolder(UsageError):
    """A name under ``configs/`` that SGLang cannot read a Triton version from. Not an ArtifactError, which callers
    read as "no configs/ folder": the folder is there, and a server reading it fails on this name."""


def resolve(root: Path, name: str, triton_version: str) -> tuple[Path | None, str | None]:
    """(file SGLang would read, the triton folder it came from) under ``root``, following SGLang's order; (None,
    None) when no folder has it. ArtifactError where SGLang itself would raise FileNotFoundError (no ``configs/``
    folder), UnreadableVersionFolder where it would raise ValueError (a ``triton_*`` name with no version)."""
    configs = Path(root) / "configs"
    exact = configs / version_dir(triton_version) / name
    if exact.is_file():
        return exact, exact.parent.name
    if not configs.is_dir():
        raise ArtifactError(f"{root} has no configs/ folder: SGLang raises FileNotFoundError reading it")
    folders = [d.name for d in configs.iterdir() if d.name.startswith("triton_")]
    unreadable = sorted(f for f in folders if _version_key(f) is None)
    if unreadable:
        raise UnreadableVersionFolder(
            f"{configs / unreadable[0]}: SGLang reads a Triton version from every name in {configs} that starts with "
            f"triton_ (int() of each part separated by '_' or '.'), and this one has none: a server that does not find "
            f"{name} in {version_dir(triton_version)}/ raises ValueError at its first MoE layer; rename or remove it")
    # the folder SGLang reads for a name is the one its version spells, not the name itself (a dotted name's files
    # are never read), and it skips the running version's, looked in above
    parsed = sorted({(_version_key(f), version_dir(v)) for f in folders if (v := _version_of(f)) != triton_version},
                    reverse=True)
    for _, folder in parsed:
        if (configs / folder / name).is_file():
            return configs / folder / name, folder
    return None, None


def read_table(path: Path) -> dict[int, dict]:
    """{M: knobs} as SGLang reads it (every key through int()); ArtifactError naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text())
        table = {int(k): dict(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise ArtifactError(f"{path}: not a SGLang MoE config file ({type(e).__name__}: {e})") from None
    if not table:
        raise ArtifactError(f"{path}: empty")
    return table


def nearest(table: dict[int, dict], m: int) -> int:
    """SGLang's choice of batch size for M: the nearest, the first in file order on a tie."""
    return min(table, key=lambda k: abs(k - m))


def ordered(knobs: dict) -> dict:
    """One entry's knobs in SGLang's order; anything SGLang's tuner does not write is refused."""
    extra = set(knobs) - set(KNOB_ORDER)
    if extra:
        raise ArtifactError(f"SGLang's files hold only {', '.join(KNOB_ORDER)}; got {sorted(extra)}")
    return {k: knobs[k] for k in KNOB_ORDER if k in knobs}


def render(table: dict[int, dict]) -> str:
    """The text SGLang's tuner writes for ``table`` (its ``save_configs(sort_config(...))``)."""
    body = {str(int(m)): ordered(table[m]) for m in sorted(table, key=int)}
    return json.dumps(body, indent=4) + "\n"
