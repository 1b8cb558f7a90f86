"""Adopt a kernel that already carries ``@triton.autotune``: one call makes it a KernelSpec, read from its decorator.

    SPEC = flytune_nb.adopt("fla.modules.norm.l2norm:l2norm_fwd_kernel", axes=("T", "D"),
                            make_inputs=make_inputs, launch=launch, reference=reference)

The decorator already says the search space (its configs, pruned per shape by its ``prune_configs_by``), the tuning
key, and which arguments are written in place (``restore_value``: the spec's ``mutates``) or accumulated into
(``reset_to_zero``: ``zeroes``). The user adds what it cannot say: inputs for a shape, the launch as the kernel's
caller writes it (grid included), and the torch reference. The spec then sweeps, exports and checks like a kernel
folder, and ``flytune_nb.prime`` serves its winners to the unmodified kernel (flytune_nb.serve.prime).

How one config is launched: ``launch(kernel, inputs)`` calls the decorated kernel as its library does; on the way,
the autotuner's ``run`` is intercepted (flytune_nb._compat.triton.intercepted) and launches the config being
measured as a cache hit would (its pre_hook, then the jit function), searching nothing. Outer ``@triton.heuristics``
run before it as usual, inner ones after it.

Checked once, when the spec is made, on the meta device (shapes and dtypes only: nothing allocated, nothing
launched): that ``launch`` reaches the kernel, that it passes every ``key`` argument, that the reference returns, for
names of inputs, tensors of those inputs' shapes, and that ``restore_value`` / ``reset_to_zero`` name tensors of the
inputs. Each failure is one AdoptError (a UsageError) naming the problem.

Decisions where the decorator holds more than flytune_nb's Config (integer knobs, as SGLang's files):
- a bool constexpr in the configs is a 0/1 knob, passed back as the bool; a constexpr whose value is the same in every
  config (a string, a float) is no knob and is passed as written; one that varies and is neither int nor bool is a
  knob holding the index of its value, in the order the decorator first lists the values;
- a config's ``pre_hook`` is kept: the config launched (and primed) is the decorator's own triton.Config, hook
  included; two configs that differ only in their hook cannot be told apart as data and are refused;
- ``autotune(pre_hook=..., post_hook=...)`` is refused: while benchmarking it replaces restore_value / reset_to_zero,
  and flytune_nb restores in-place state itself; a set ``ir_override`` (or 3.2/3.3 warp-specialisation field) too;
- ``num_ctas=1`` (Triton's default) is left out of a config, ``maxnreg`` is written only when set, ``num_warps`` and
  ``num_stages`` always (Triton's default stages, 3, is not flytune's);
- the heuristic default (zero search) is the first config the decorator keeps for the shape, unless ``default=``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from flytune_nb._compat import triton as tc
from flytune_nb._compat.stdlib import caller_module
from flytune_nb.core.config import HIP_OPTIONS, Config, ConfigError
from flytune_nb.core.suggest import closest
from flytune_nb.core.device import DeviceInfo, ensure_backend, interpreting
from flytune_nb.core.input_names import read as read_input_names
from flytune_nb.core.key import code_tokens
from flytune_nb.core.spec import KernelSpec
from flytune_nb.errors import KernelUnavailable, UsageError, first_line


class AdoptError(UsageError):
    """An autotuned kernel, or what was given to adopt it, that cannot make a correct KernelSpec."""


@dataclass(frozen=True)
class Layout:
    """What one call of ``launch`` shows: the inputs the reference checks (in its order), and the inputs the
    decorator's restore_value / reset_to_zero name."""

    written: tuple  # input names the reference returns, in its order
    mutates: tuple  # restore_value, as input names
    zeroes: tuple  # reset_to_zero, as input names

    @property
    def outputs(self) -> tuple:
        return tuple(n for n in self.written if n not in self.mutates and n not in self.zeroes)


class _Knobs:
    """triton.Config kwargs <-> flytune_nb Config params (integers), per the module's decisions."""

    def __init__(self, configs: Sequence, where: str) -> None:
        values: dict[str, list] = {}
        for c in configs:
            for k, v in c.kwargs.items():
                if k not in HIP_OPTIONS and v not in values.setdefault(k, []):
                    values[k].append(v)
        self.kind, self.choices, self.fixed = {}, {}, {}
        for k, vs in values.items():
            everywhere = all(k in c.kwargs for c in configs)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in vs):
                self.kind[k] = "int"
            elif all(isinstance(v, bool) for v in vs):
                self.kind[k] = "bool"
            elif len(vs) == 1 and everywhere:
                self.kind[k], self.fixed[k] = "fixed", vs[0]
            else:
                self.kind[k], self.choices[k] = "choice", vs
        self.where = where

    def ours(self, config) -> Config:
        f = tc.config_fields(config)
        if f["unsupported"]:
            raise AdoptError(f"{self.where}: config {config} sets {', '.join(sorted(f['unsupported']))}, which "
                             f"flytune_nb's configs cannot carry")
        params, hip = {}, {}
        for k, v in f["kwargs"].items():
            kind = self.kind.get(k)
            if k in HIP_OPTIONS:
                hip[k] = v
            elif kind == "fixed":
                continue
            elif kind == "bool" or kind == "int":
                params[k] = int(v)
            elif kind == "choice" and v in self.choices[k]:
                params[k] = self.choices[k].index(v)
            else:
                raise AdoptError(f"{self.where}: config {config} sets {k}={v!r}, a value none of the decorator's "
                                 f"configs has")
        try:
            return Config(params, num_warps=f["num_warps"], num_stages=f["num_stages"],
                          num_ctas=None if f["num_ctas"] in (None, 1) else f["num_ctas"], maxnreg=f["maxnreg"],
                          **hip)
        except ConfigError as e:
            raise AdoptError(f"{self.where}: config {config}: {e}") from None

    def theirs(self, config: Config):
        kwargs = dict(self.fixed)
        for k, v in config.kwargs.items():
            kind = self.kind.get(k, "int")
            if kind == "bool":
                kwargs[k] = bool(v)
            elif kind == "choice":
                if not 0 <= v < len(self.choices[k]):
                    raise ConfigError(f"{k}={v}: the decorator lists {len(self.choices[k])} values for {k}")
                kwargs[k] = self.choices[k][v]
            else:
                kwargs[k] = v
        kwargs.update(config.hip_only)
        return tc.triton_config(kwargs, num_warps=config.num_warps, num_stages=config.num_stages,
                                num_ctas=config.num_ctas, maxnreg=config.maxnreg)


class AdoptedKernel:
    """The decorated kernel and the user's three functions, with what the spec and ``prime`` need of them."""

    def __init__(self, kernel, where: str | None, make_inputs, launch, reference) -> None:
        try:
            self.autotuner, self.outer, self.inner, self.jit = tc.unwrap_autotuned(kernel)
            self.fields = tc.read_autotuner(self.autotuner)
        except tc.AutotunerLayoutError as e:
            raise AdoptError(f"{where or _label(kernel)}: {e}") from None
        self.base_fn = self.jit.fn
        where = where or f"{self.base_fn.__module__}:{self.base_fn.__name__}"
        self.kernel, self.where = kernel, where
        self.make_inputs, self.launch, self.reference = make_inputs, launch, reference
        ensure_backend()  # chosen now if nothing chose it yet: whether the kernel can run here depends on it
        if interpreting() and type(self.jit).__name__ == "JITFunction":
            raise AdoptError(f"{where} was decorated before Triton's interpreter was chosen, so it cannot run on "
                             f"this machine without a GPU: restart, then import flytune_nb before the kernel's "
                             f"module (or adopt it by name, 'module:attribute'), or set TRITON_INTERPRET=1 before "
                             f"starting Python or Jupyter")
        if self.fields["user_pre_hook"] or self.fields["user_post_hook"]:
            raise AdoptError(f"{where}: autotune(pre_hook=..., post_hook=...) replaces restore_value / reset_to_zero "
                             f"while benchmarking; flytune_nb restores in-place state itself: declare the tensors in "
                             f"restore_value / reset_to_zero instead")
        _check_declared_names(self.fields, self.base_fn.__name__, where)
        configs = self.fields["configs"]
        _check_config_knobs(configs, self.fields["arg_names"], self.base_fn.__name__, where)
        self.knobs = _Knobs(configs, where)
        self.by_config: dict[Config, Any] = {}  # ours -> the decorator's own triton.Config (hook and all)
        self.ours_of: dict[int, Config] = {}
        for c in configs:
            ours = self.knobs.ours(c)
            seen = self.by_config.get(ours)
            if seen is not None and seen.pre_hook is not c.pre_hook:
                raise AdoptError(f"{where}: configs {seen} and {c} differ only in their pre_hook, which flytune_nb's "
                                 f"configs (data) cannot tell apart")
            self.by_config.setdefault(ours, c)
            self.ours_of[id(c)] = ours
        self.heuristics = tc.heuristic_names(self.outer + self.inner)

    # -- the decorator's space, in flytune_nb's terms ------------------------------------------------------------
    def to_ours(self, config) -> Config:
        return self.ours_of.get(id(config)) or self.knobs.ours(config)

    def to_triton(self, config: Config):
        return self.by_config.get(config) or self.knobs.theirs(config)

    # -- one call ------------------------------------------------------------------------------------------------
    def capture(self, inputs: dict) -> list[tuple[tuple, dict]]:
        """The (args, kwargs) each call of ``launch`` made to the autotuner, nothing launched."""
        seen: list = []

        def record(*args, **kwargs):  # kwargs include grid and warmup, as kernel[grid] passes them
            seen.append((args, dict(kwargs)))

        with tc.intercepted(self.autotuner, record):
            try:
                self.launch(self.kernel, inputs)
            except AdoptError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's function: one line naming it
                raise AdoptError(f"{self.where}: launch(kernel, inputs) raised {type(e).__name__}: "
                                 f"{first_line(e)}") from e
        if not seen:
            raise AdoptError(f"{self.where}: launch(kernel, inputs) never called {self.base_fn.__name__} (it must "
                             f"launch the kernel it is given, kernel[grid](...), as the kernel's caller does)")
        return seen

    def call(self, inputs: dict) -> tuple[tuple, dict]:
        """The first call's (args, kwargs without grid/warmup), the key arguments checked."""
        args, kwargs = self.capture(inputs)[0]
        kwargs = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
        named = {**dict(zip(self.fields["arg_names"], args)), **kwargs}
        missing = [k for k in self.fields["keys"] if k not in named]
        if missing:
            raise AdoptError(f"{self.where}: key argument{'s' if len(missing) > 1 else ''} {', '.join(missing)} of "
                             f"@triton.autotune(key={self.fields['keys']}) not passed by launch; the autotuner "
                             f"would leave {'them' if len(missing) > 1 else 'it'} out of its key")
        return args, kwargs

    def key(self, inputs: dict) -> tuple:
        """The autotuner's own cache key for this call."""
        args, kwargs = self.call(inputs)
        return tc.autotune_key(self.autotuner, args, kwargs)

    def pruned(self, inputs: dict) -> list:
        """The decorator's configs left for this call by its prune_configs_by, as the autotuner computes them."""
        args, kwargs = self.capture(inputs)[0]
        try:
            return tc.pruned_configs(self.autotuner, args, kwargs)
        except Exception as e:  # noqa: BLE001 - the decorator's own prune function
            raise AdoptError(f"{self.where}: its prune_configs_by raised {type(e).__name__}: {first_line(e)}") from e

    def layout(self, inputs: dict) -> tuple[Layout, dict]:
        """(Layout, the reference's result) for one call on ``inputs``; AdoptError naming what does not fit."""
        import torch

        from flytune_nb._compat.torch import view_base

        args, kwargs = self.call(inputs)
        named = {**dict(zip(self.fields["arg_names"], args)), **kwargs}
        try:
            ref = self.reference(inputs)
        except Exception as e:  # noqa: BLE001 - the user's function
            raise AdoptError(f"{self.where}: reference(inputs) raised {type(e).__name__}: {first_line(e)}") from e
        if not isinstance(ref, Mapping) or not ref:
            raise AdoptError(f"{self.where}: reference(inputs) must return {{input name: expected tensor}} for "
                             f"what the kernel writes; got {type(ref).__name__}")
        for name, value in ref.items():
            if name not in inputs or not torch.is_tensor(inputs[name]):
                raise AdoptError(f"{self.where}: reference returns {name!r}, which is not a tensor of the inputs "
                                 f"({', '.join(k for k, v in inputs.items() if torch.is_tensor(v))})")
            if not torch.is_tensor(value) or tuple(value.shape) != tuple(inputs[name].shape):
                got = tuple(value.shape) if torch.is_tensor(value) else type(value).__name__
                raise AdoptError(f"{self.where}: reference's {name!r} has shape {got}, but the kernel writes "
                                 f"inputs[{name!r}] of shape {tuple(inputs[name].shape)}")

        def input_of(arg: str, what: str) -> str:
            value = named.get(arg)
            for k, v in inputs.items():
                if torch.is_tensor(v) and value is not None and (value is v or view_base(value) is v):
                    return k
            raise AdoptError(f"{self.where}: {what} names {arg!r}, but launch passes it "
                             f"{'nothing' if value is None else 'a tensor that is not one of the inputs'}; "
                             f"flytune_nb could not restore it between timed runs")

        mutates = tuple(input_of(a, "restore_value") for a in self.fields["restore_value"] if named.get(a) is not None)
        zeroes = tuple(input_of(a, "reset_to_zero") for a in self.fields["reset_to_zero"] if named.get(a) is not None)
        return Layout(tuple(ref), mutates, zeroes), ref

    def run(self, inputs: dict, config: Config, written: tuple) -> tuple:
        """Launch ``config`` through ``launch`` and return the written inputs. Under flytune_nb.kit.launcher's
        compile_only (the precompile pool), compile without launching."""
        from flytune_nb.kit.launcher import compiled, compiling_for

        triton_config = self.to_triton(config)
        backend = compiling_for()
        warmup = True if backend not in (None, "interpreter") else None
        at = self.autotuner

        def one(*args, **kwargs):
            out = tc.launch_config(at, args, kwargs, triton_config, warmup=warmup)
            if warmup:
                compiled(out, kwargs.get("grid"), args)
            return out

        with tc.intercepted(at, one):
            self.launch(self.kernel, inputs)
        return tuple(inputs[n] for n in written)

    def fingerprint(self, extra_sources: Sequence[Callable]) -> str:
        """The code that decides what a config does and which is best: the kernel's file (its helpers are there
        too), the files of the user's functions, and the decorator's declarations."""
        h = hashlib.sha256()
        for part in [_code_of(self.base_fn)] + [_code_of(f) for f in extra_sources if f is not None]:
            h.update(part)
            h.update(b"\0")
        f = self.fields
        h.update(repr((f["keys"], f["restore_value"], f["reset_to_zero"], f["top_k"], _qualname(f["perf_model"]),
                       _qualname(f["early_config_prune"]), [str(c) + _qualname(c.pre_hook) for c in f["configs"]],
                       self.heuristics)).encode())
        return h.hexdigest()[:16]


def _check_declared_names(fields: dict, fn_name: str, where: str) -> None:
    """Every name the decorator's key / restore_value / reset_to_zero lists is an argument of the kernel. Triton
    drops a key name that is none (the kernel is then keyed on its tensors' dtypes alone: one config for every size)
    and fails with a bare KeyError on a restore_value / reset_to_zero one only while benchmarking; the fix is in the
    decorator, not in the launch."""

    args = fields["arg_names"]
    for field_name, label in (("keys", "key"), ("restore_value", "restore_value"), ("reset_to_zero", "reset_to_zero")):
        unknown = [n for n in fields[field_name] if n not in args]
        if not unknown:
            continue
        hints = []
        for n in unknown:
            close = closest(str(n), args)
            hints.append(f"{n!r}" + (f" (did you mean {close!r}?)" if close else ""))
        effect = ("Triton leaves such a name out of its key, so the autotuner keys every call on the tensors' "
                  "dtypes alone" if label == "key" else "Triton fails on it with a KeyError when it benchmarks")
        which = "is not an argument" if len(unknown) == 1 else "are not arguments"
        raise AdoptError(f"{where}: @triton.autotune({label}={fields[field_name]}) names {', '.join(hints)}, which "
                         f"{which} of {fn_name} ({', '.join(args)}); {effect}. Fix the name in the decorator")


def _check_config_knobs(configs: Sequence, args: Sequence[str], fn_name: str, where: str) -> None:
    """Every name a config of the decorator sets is an argument of the kernel or a launch option Triton accepts. On a
    GPU Triton refuses the launch of any other (a KeyError for every config of the sweep); its interpreter drops it
    without a word, so a CPU sweep would pass and export a knob the kernel never reads."""

    allowed = set(args) | tc.launch_option_names()
    for c in configs:
        unknown = [k for k in tc.config_fields(c)["kwargs"] if k not in allowed]
        if not unknown:
            continue
        hints = []
        for n in unknown:
            close = closest(str(n), args)
            hints.append(f"{n!r}" + (f" (did you mean {close!r}?)" if close else ""))
        which = "is not an argument" if len(unknown) == 1 else "are not arguments"
        raise AdoptError(f"{where}: @triton.autotune config {c} sets {', '.join(hints)}, which {which} of {fn_name} "
                         f"({', '.join(args)}) nor a launch option; Triton refuses such a launch on a GPU, and its "
                         f"interpreter ignores the name. Fix the config in the decorator")


def _qualname(fn) -> str:
    return "" if fn is None else f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


@lru_cache(maxsize=256)
def _file_code(path: str, _mtime: int) -> bytes:
    return code_tokens(Path(path).read_bytes())


def _code_of(fn) -> bytes:
    """The code of the file that defines ``fn``; its own source where it has no file (a notebook cell)."""
    target = inspect.unwrap(fn)
    try:
        path = inspect.getsourcefile(target)
        if path and Path(path).is_file():
            return _file_code(path, Path(path).stat().st_mtime_ns)
        return code_tokens(inspect.getsource(target).encode())
    except (TypeError, OSError):
        return repr(target).encode()


def _label(obj) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def resolve(kernel) -> tuple[Any, str | None]:
    """(the decorated object, how to name it in messages: None for an object) for an object or
    ``"module:attribute"``."""
    if not isinstance(kernel, str):
        return kernel, None
    module_name, sep, attr = kernel.partition(":")
    if not sep or not module_name or not attr:
        raise AdoptError(f"{kernel!r}: name an autotuned kernel as 'package.module:attribute'")
    ensure_backend()  # TRITON_INTERPRET must be set before the module's @triton.jit runs
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            top = module_name.split(".")[0]
            hint = _near_module(top)
            raise KernelUnavailable(f"{kernel}: needs {top!r}, which is not installed here{hint}") from None
        raise AdoptError(f"{kernel}: importing {module_name} failed: {type(e).__name__}: {e}") from e
    except Exception as e:  # noqa: BLE001 - a library that does not import here: one line
        raise AdoptError(f"{kernel}: importing {module_name} failed: {type(e).__name__}: {first_line(e)}") from e
    if not hasattr(module, attr):
        raise AdoptError(f"{kernel}: module {module_name} has no attribute {attr!r}")
    return getattr(module, attr), kernel


def _near_module(name: str) -> str:
    """" (did you mean 'my_lib'?)" where a module of a close name is importable: a name misspelt beside the file
    that adopts it reads as a library missing from the machine otherwise."""
    import pkgutil

    try:
        names = {m.name for m in pkgutil.iter_modules()}
    except Exception:  # noqa: BLE001 - an unreadable entry of sys.path: no hint, the message stands
        return ""
    close = closest(name, sorted(names), cutoff=0.8)
    return f" (did you mean {close!r}?)" if close else ""


def _probe_device(torch_device: str) -> DeviceInfo:
    """What make_inputs gets for the adoption checks: allocate on ``torch_device`` (the meta device: nothing is
    allocated); asking the real device here would start a GPU context in processes that must not have one."""
    backend = "interpreter" if interpreting() else "cuda"
    return DeviceInfo(backend, "adoption_probe", "probe", 1, 0, 0, torch_device)


def adopt(kernel, *, make_inputs: Callable, launch: Callable, reference: Callable, axes: Sequence[str],
          shape_of: Callable | None = None, name: str | None = None, batch_axis: str | None = None,
          dtypes: Sequence[str] = ("bf16", "fp16", "fp32"), default: Callable | Config | None = None,
          example_shape: Mapping[str, int] | None = None, tolerance: Callable | None = None,
          tolerance_scale: float = 1.0, bytes: Callable | None = None, flops: Callable | None = None,
          baseline: Callable | None = None, dtype_from: str = "", artifact_axes: Sequence[str] = (),
          description: str = "") -> KernelSpec:
    """A KernelSpec for an existing ``@triton.autotune`` kernel (the decorated object or ``"module:attribute"``).

    ``make_inputs(shape, dtype, device)``: fresh random inputs and output buffers, on ``device.torch_device``.
    ``launch(kernel, inputs)``: call ``kernel[grid](...)`` as the kernel's caller does (same grid, same arguments).
    ``reference(inputs)``: ``{input name: expected tensor}`` for every input the kernel writes, from the inputs as
    they are before the launch. ``shape_of(inputs)``: the shape of a real call (for ``tuned``). The other keywords
    are KernelSpec's. Assign the result at module level (``SPEC = adopt(...)``) so that worker processes can load it
    by name (``"my_kernels.py:SPEC"``)."""
    from flytune_nb.core import dtypes as dtype_names
    from flytune_nb.core import registry

    # Worker processes load the spec from the module that assigns ``SPEC = adopt(...)``: the one calling us. The
    # user's functions may come from a shared helper module, which holds no SPEC of this kernel.
    caller = caller_module()
    obj, where = resolve(kernel)
    # checked before anything is called with them: axes="MN" would read as ('M', 'N'), dtypes="fp32" as 'f', 'p', …
    if isinstance(axes, str) or not isinstance(axes, Sequence):
        raise AdoptError(f"{where}: axes must be a tuple of names, e.g. axes=('M', 'N'); got {axes!r}")
    dtypes = tuple(dtype_names.canonical(d) for d in dtype_names.parse_list(dtypes))
    if not dtypes:
        raise AdoptError(f"{where}: dtypes is empty; name at least one, e.g. dtypes=('bf16',)")
    if default is not None and not isinstance(default, Config) and not callable(default):
        raise AdoptError(f"{where}: default must be a Config or a function (shape, dtype, device) -> Config; got "
                         f"{type(default).__name__} {default!r:.60}")
    for label, fn in (("make_inputs", make_inputs), ("launch", launch), ("reference", reference)):
        if not callable(fn):
            raise AdoptError(f"{where}: {label} must be a function; got {type(fn).__name__} {fn!r:.60}")
    adopted = AdoptedKernel(obj, where, make_inputs, launch, reference)
    name = adopted.base_fn.__name__ if name is None else name
    if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
        raise AdoptError(f"{where}: name must be letters, digits and '_', got {name!r}")
    clash = registry.discover().get(name)
    if clash is not None:  # as the CLI would refuse it at its first use, refused here, where it is written
        raise AdoptError(f"{where}: the name {name!r} is taken by the kernel folder {clash}; pass another name=")
    axes = tuple(axes)
    if not axes:
        raise AdoptError(f"{where}: give the shape axes, e.g. axes=('M', 'N')")
    example = {a: int(v) for a, v in (example_shape or {}).items()}
    probe_shape = {a: example.get(a, 4096) for a in axes}
    layout, coarse, made = _check(adopted, probe_shape, tuple(dtypes)[0])
    if shape_of is not None:
        _check_shape_of(adopted, shape_of, probe_shape, tuple(dtypes)[0])
    # The spec's run hands the inputs to ``launch`` out of sight of tuned()'s reading of the input names, so they are
    # read here from the user's functions and declared; none where those read inputs out of sight too (a launch
    # passing **inputs): then tuned() refuses no name.
    names = read_input_names([(launch, 1), (reference, 0)] + [(f, 0) for f in (shape_of, baseline) if f is not None],
                             [make_inputs], axes=axes, also=(*made, dtype_from))

    @lru_cache(maxsize=512)
    def space(shape_items: tuple, dtype: str, device: DeviceInfo) -> tuple:
        inputs = _inputs_for_planning(make_inputs, dict(shape_items), dtype, device)
        return tuple(dict.fromkeys(adopted.to_ours(c) for c in adopted.pruned(inputs)))

    def configs(shape, dtype, device):
        return list(space(tuple(shape.items()), dtype, device))

    if default is None:
        def heuristic(shape, dtype, device):
            return space(tuple(shape.items()), dtype, device)[0]

        heuristic.first_of_space = True  # a fitted rule writes it out as configs(...)[0] (analysis.fit)
    elif isinstance(default, Config):
        heuristic = lambda shape, dtype, device: default  # noqa: E731
    else:
        heuristic = default

    def run(inputs, config):
        return adopted.run(inputs, config, layout.written)

    def ref(inputs):
        expected = reference(inputs)
        return tuple(expected[n] for n in layout.written)

    def no_shape_of(inputs):
        raise AdoptError(f"{name}: adopt(..., shape_of=...) was not given; tuned(...) needs it to read a call's shape")

    f = adopted.fields
    notes = [f"@triton.autotune kernel {where}: key {f['keys']}, {len(f['configs'])} configs"]
    if f["early_config_prune"] or f["perf_model"]:
        notes.append("pruned per shape by its prune_configs_by")
    if layout.mutates or layout.zeroes:
        notes.append(f"in place: {', '.join(layout.mutates + layout.zeroes)}")
    if coarse:
        notes.append(f"its key does not change with {', '.join(coarse)}: those shapes share one autotuner entry "
                     f"(prime serves one winner per key)")
    spec = KernelSpec(
        name=name, axes=axes, batch_axis=batch_axis or axes[0], dtypes=tuple(dtypes), make_inputs=make_inputs,
        run=run, reference=ref, configs=configs, default=heuristic, shape_of=shape_of or no_shape_of,
        outputs=layout.outputs, mutates=layout.mutates, zeroes=layout.zeroes, bytes=bytes, flops=flops,
        tolerance=tolerance, tolerance_scale=tolerance_scale, baseline=baseline, dtype_from=dtype_from,
        fingerprint=adopted.fingerprint([make_inputs, launch, reference, shape_of,
                                         default if callable(default) else None]),
        description=description or "; ".join(notes) + ".", artifact_axes=tuple(artifact_axes),
        example_shape=example, input_names=() if names.unknowable else tuple(sorted(names.known)),
        extra={"adopted": adopted, "module": caller or getattr(make_inputs, "__module__", None),
               "also_modules": (getattr(make_inputs, "__module__", None),), "coarse_axes": coarse},
    )
    registry.remember(spec)
    return spec


def _inputs_for_planning(make_inputs, shape: dict, dtype: str, device: DeviceInfo) -> dict:
    """Inputs to read keys and prune configs from: on the meta device when make_inputs can build them there (a
    1 GiB shape costs nothing), else on the CPU (a make_inputs that reads values): nothing is launched on them, and
    ``device`` may be a GPU this machine does not have (``flytune lookup --device h200``)."""
    try:
        return make_inputs(shape, dtype, dataclasses.replace(device, torch_device="meta"))
    except Exception:  # noqa: BLE001 - e.g. a make_inputs that reads values
        pass
    try:
        return make_inputs(shape, dtype, dataclasses.replace(device, torch_device="cpu"))
    except Exception as e:  # noqa: BLE001 - the user's function
        raise AdoptError(f"make_inputs cannot build inputs for {shape} {dtype} on the meta device or the CPU, to "
                         f"read the autotuner's key and configs from: {type(e).__name__}: {first_line(e)}") from e


def _check(adopted: AdoptedKernel, shape: dict, dtype: str) -> tuple[Layout, tuple, tuple]:
    """The adoption checks on one shape (see the module doc): on the meta device, else on the CPU (nothing is
    launched either way). Also which axes the autotuner's key ignores there (each axis doubled in turn), and the
    names of the inputs make_inputs made."""
    errors = []
    for where in ("meta", "cpu"):
        device = _probe_device(where)
        try:
            inputs = adopted.make_inputs(shape, dtype, device)
        except Exception as e:  # noqa: BLE001 - the user's function
            errors.append(f"make_inputs raised {type(e).__name__}: {first_line(e)}")
            continue
        try:
            layout, _ = adopted.layout(inputs)
        except AdoptError as e:
            if where == "meta" and isinstance(e.__cause__, (NotImplementedError, RuntimeError)):
                errors.append(str(e))  # an op with no meta kernel: try real tensors
                continue
            raise
        coarse = _coarse_axes(adopted, shape, dtype, device, adopted.key(inputs)) if where == "meta" else ()
        return layout, coarse, tuple(inputs)
    raise AdoptError(f"{adopted.where}: cannot check the adoption on shape {shape} {dtype}: {errors[-1]}")


def _check_shape_of(adopted: AdoptedKernel, shape_of: Callable, shape: dict, dtype: str) -> None:
    """``shape_of(make_inputs(shape))`` gives ``shape`` back. tuned() looks a call's config up by what shape_of reads,
    so one that reads an axis off the wrong dimension serves another shape's entry, silently. Checked on the meta
    device, on the probe shape and on one whose axes all differ (a swap of two equal axes shows nothing)."""
    distinct = {a: v * 2 ** i for i, (a, v) in enumerate(shape.items())}
    for probe in (shape, distinct):
        try:
            inputs = adopted.make_inputs(probe, dtype, _probe_device("meta"))
        except Exception:  # noqa: BLE001 - a shape make_inputs refuses, or cannot make on meta: nothing learnt
            continue
        try:
            got = shape_of(inputs)
        except Exception:  # noqa: BLE001 - e.g. one that reads a value: tuned() reports its errors at the call
            return
        try:
            same = all(int(got[a]) == v for a, v in probe.items())
        except Exception:  # noqa: BLE001 - not a mapping of the axes to numbers (a tensor on meta cannot be read)
            same = False
        if not same:
            raise AdoptError(f"{adopted.where}: shape_of(make_inputs({probe})) returned {got!r}; it must give the "
                             f"shape back, else tuned() looks a call's config up under another shape")


def _coarse_axes(adopted: AdoptedKernel, shape: dict, dtype: str, device: DeviceInfo, key: tuple) -> tuple:
    out = []
    for axis in shape:
        try:
            other = adopted.key(adopted.make_inputs({**shape, axis: 2 * shape[axis]}, dtype, device))
        except Exception:  # noqa: BLE001 - a shape the user's functions refuse: nothing learnt
            continue
        if other == key:
            out.append(axis)
    return tuple(out)
