"""Fit a suggested heuristic from stored sweeps, emit it as code the heuristic editor opens, and score it on shapes
left out of the fit.

The rule is a small decision tree over shape features (log2 of each axis, how many 128x128 tiles each SM gets, how
w compares to L2, ...), with at each leaf one config "template" picked among the sweeps' winners: the config whose
geomean slowdown over the leaf's shapes is lowest. A template may be relative to the shape (a row kernel's BLOCK_N
as next_pow2(N) >> k: "the whole row", "half of it"), so a leaf fitted on N=4096 means the same thing at N=5120.
Plain Python, no scikit-learn: the trees are a handful of nodes over tens of shapes.

- ``from_store`` / ``from_fixture``: per (shape, dtype), every config's time (full fidelity where measured, else the
  quick rung of a halving search; failed = inf), the most recently measured tuning key only.
- ``fit``: the tree; ``Rule.predict`` gives a config per shape, ``Rule.source`` the ``default(shape, dtype,
  device)`` function as text (landed on the kernel's space by ``nearest``, as the hand-written rules are).
- ``cross_validate``: fits without each group of shapes (all batch sizes of one N, by default: generalising to an
  unswept model shape is the point) and reports the regret (pick / best) there, beside the hand rule's on the same
  shapes. A pick the store never timed at a held-out shape is counted as unmeasured, never guessed.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from flytune_nb.analysis.scores import regret
from flytune_nb.core.config import Config
from flytune_nb.core.dtypes import itemsize
from flytune_nb.errors import UsageError
from flytune_nb.kit.spaces import next_pow2

NEAR_BEST = 1.03  # a leaf chooses among configs within 3% of some shape's best (the winners), not all of them
MIN_GAIN = math.log(1.01)  # a split (or a config over the hand rule) must gain 1% per shape: the timer's noise
MIN_SUPPORT = 2  # a leaf overrides the hand rule only on the word of two shapes or more: one is an anecdote


class FitError(UsageError):
    """Nothing to fit (no sweeps for that kernel in the store, or no config that ran)."""


@dataclass(frozen=True)
class ShapeTimes:
    """One swept (shape, dtype): p50 ms per config (inf: failed)."""
    shape: dict
    dtype: str
    times: dict

    @property
    def best(self) -> float:
        ok = [t for t in self.times.values() if math.isfinite(t)]
        return min(ok) if ok else math.inf

    @property
    def worst(self) -> float:
        ok = [t for t in self.times.values() if math.isfinite(t)]
        return max(ok) if ok else math.inf

    def ratio(self, config: Config) -> float | None:
        """time / best, inf for a failed config, None where it was not timed."""
        t = self.times.get(config)
        return None if t is None else t / self.best


# -- data --------------------------------------------------------------------------------------------------------
def from_store(path, kernel: str, *, dtype: str | None = None, device: str | None = None,
               canonical: Callable | None = None) -> list[ShapeTimes]:
    from flytune_nb.engine.store import Store

    store = Store(path, readonly=True)
    try:
        df = store.on_search_clock(store.frame())
    finally:
        store.close()
    df = df[df["kernel"] == kernel]
    if dtype:
        df = df[df["dtype"] == dtype]
    if device:
        df = df[df["device"] == device]
    out = []
    for (shape, dt, _dev), g in df.groupby(["shape", "dtype", "device"], sort=False):
        g = g[g["key"] == g.loc[g["id"].idxmax(), "key"]]  # one kernel version per shape, the latest
        times: dict = {}
        for fidelity in ("quick", "full"):  # full overwrites quick where both exist
            for _, row in g[g["fidelity"] == fidelity].iterrows():
                c = Config.from_json(row["config"])
                c = canonical(c) if canonical else c
                times[c] = float(row["p50"]) if row["status"] == "ok" and row["p50"] == row["p50"] else math.inf
        if any(math.isfinite(t) for t in times.values()):
            out.append(ShapeTimes(json.loads(shape), dt, times))
    if not out:
        raise FitError(f"no timed {kernel} sweeps in {path}" + (f" for {dtype}" if dtype else ""))
    return out


def from_fixture(data, kernel: str, canonical: Callable | None = None) -> list[ShapeTimes]:
    """The replay fixtures' format (tests/fixtures/h200_*sweeps.json): {"sweeps": [{kernel, dtype, shape,
    p50_ms: {config json: ms | null}}]}; a path or the parsed dict."""
    if not isinstance(data, dict):
        data = json.loads(Path(data).read_text())
    out = []
    for s in data["sweeps"]:
        if s["kernel"] != kernel:
            continue
        times = {}
        for text, ms in s["p50_ms"].items():
            c = Config.from_json(text)
            times[canonical(c) if canonical else c] = math.inf if ms is None else float(ms)
        out.append(ShapeTimes(dict(s["shape"]), s["dtype"], times))
    if not out:
        raise FitError(f"no {kernel} sweeps in the fixture")
    return out


# -- features ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Feature:
    """A number computed from (shape, dtype, device); ``expr`` is the Python the emitted rule evaluates (names:
    shape, dtype, device, math, itemsize, next_pow2)."""
    name: str
    expr: str

    def __call__(self, shape, dtype, device) -> float:
        return float(eval(self.expr, {"math": math, "itemsize": itemsize, "next_pow2": next_pow2},  # noqa: S307
                          {"shape": shape, "dtype": dtype, "device": device}))


def axis_features(axes: Sequence[str]) -> list[Feature]:
    return [Feature(f"log2_{a}", f"math.log2(shape[{a!r}])") for a in axes]


ROW_FEATURES = axis_features(("M", "N")) + [
    Feature("row_kib", "shape['N'] * itemsize(dtype) / 1024"),
    Feature("rows_per_sm", "shape['M'] / max(device.sm_count, 1)"),
]
GEMM_FEATURES = axis_features(("M", "N", "K")) + [
    Feature("log2_tiles128_per_sm",
            "math.log2(math.ceil(shape['M'] / 128) * math.ceil(shape['N'] / 128) / max(device.sm_count, 1))"),
    Feature("log2_w_over_l2", "math.log2(shape['N'] * shape['K'] * itemsize(dtype) / max(device.l2_bytes, 1))"),
]


def default_features(spec) -> list[Feature]:
    if spec.name == "matmul":
        return GEMM_FEATURES
    if tuple(spec.axes) == ("M", "N"):
        return ROW_FEATURES
    return axis_features(spec.axes)


# -- templates: a config relative to the shape ---------------------------------------------------------------------
@dataclass(frozen=True)
class Template:
    """A config with some knobs stated against an axis: ``relative`` holds (knob, axis, k) for knob =
    next_pow2(shape[axis]) >> k (k may be negative). Everything else is as written."""
    fixed: tuple
    relative: tuple = ()

    @classmethod
    def of(cls, config: Config, shape: dict, relative: dict) -> "Template":
        d = config.to_dict()
        rel = []
        for knob, axis in relative.items():
            if knob in d and axis in shape:
                rel.append((knob, axis, int(round(math.log2(next_pow2(shape[axis]) / d.pop(knob))))))
        return cls(tuple(sorted(d.items())), tuple(sorted(rel)))

    def at(self, shape: dict) -> Config:
        d = dict(self.fixed)
        for knob, axis, k in self.relative:
            p = next_pow2(shape[axis])
            d[knob] = max(1, p >> k if k >= 0 else p << -k)
            if knob == "num_warps":
                d[knob] = min(d[knob], 32)  # a block holds at most 1024 threads
        return Config.from_dict(d)

    def code(self) -> str:
        parts = [f"{k!r}: {v}" for k, v in self.fixed]
        for knob, axis, k in self.relative:
            rhs = f"next_pow2(shape[{axis!r}])" + (f" >> {k}" if k > 0 else f" << {-k}" if k < 0 else "")
            if knob == "num_warps":
                rhs = f"max(1, min(32, {rhs}))"
            parts.append(f"{knob!r}: {rhs}")
        return "{" + ", ".join(sorted(parts)) + "}"

    def __str__(self) -> str:
        return self.code()


HAND = Template((("<hand rule>", 1),))  # a leaf that keeps the hand-written heuristic

def default_relative(spec) -> dict:
    """Row kernels' BLOCK_N and num_warps against N (single pass = k 0; warps as a share of the row, as the hand
    rules scale them: a leaf fitted at N=4096 on 8 warps means 16 at 8192); nothing for tiled kernels, whose tiles
    are absolute."""
    if "N" in spec.axes and spec.name not in ("matmul", "fused_moe"):
        return {"BLOCK_N": "N", "num_warps": "N"}
    return {}


# -- the tree ------------------------------------------------------------------------------------------------------
@dataclass
class Node:
    template: Template | None = None  # a leaf
    feature: Feature | None = None
    threshold: float = 0.0
    left: "Node | None" = None  # feature <= threshold
    right: "Node | None" = None
    n: int = 0

    def leaf_for(self, shape, dtype, device) -> "Node":
        node = self
        while node.template is None:
            node = node.left if node.feature(shape, dtype, device) <= node.threshold else node.right
        return node


@dataclass
class Rule:
    root: Node
    kernel: str
    features: list = field(default_factory=list)
    source_note: str = ""
    hand: Callable | None = None  # the hand-written default, for HAND leaves
    # the kernel is a folder whose heuristic.py sits beside its configs.py (has_configs_module); an adopted kernel
    # has no such module, and its rule reaches the space through the spec, by name
    folder: bool = True

    def predict(self, shape, dtype, device) -> Config:
        """The leaf's config at this shape (a template not yet landed on the space: ``source`` does that; a HAND
        leaf: the hand rule's own pick)."""
        template = self.root.leaf_for(shape, dtype, device).template
        return self.hand(dict(shape), dtype, device) if template is HAND else template.at(shape)

    def leaves(self) -> list[Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            if n.template is not None:
                out.append(n)
            else:
                stack += [n.right, n.left]
        return out

    @property
    def source(self) -> str:
        """``default(shape, dtype, device)`` as Python for the kernel's heuristic.py (the editor compiles it with the
        kernel folder as its package): the tree as nested ifs, each leaf's template landed on the pruned space by
        ``nearest``, among the configs that name the same knobs (a stream-K or split config lands on one)."""
        uses_hand = any(leaf.template is HAND for leaf in self.leaves())
        lines = [
            f'"""Suggested by flytune_nb.analysis.fit{": " + self.source_note if self.source_note else ""}.',
            "",
            "A decision tree over shape features; each leaf is the config with the lowest geomean slowdown over the",
            "swept shapes that reach it, landed on the pruned space"
            + (", or the hand-written rule (hand_default, below) where no config beat it." if uses_hand else "."),
            'Edit freely: the editor re-scores it."""',
            "import math",
            "",
            "from flytune_nb.kit import Config, itemsize",
            "from flytune_nb.kit.spaces import nearest, next_pow2",
            "",
            *(["from .configs import configs"] if self.folder else _spec_space(self.kernel)),
            "",
            "",
            "def _landed(shape, dtype, device, knobs):",
            "    space = configs(shape, dtype, device)",
            "    want = Config.from_dict(knobs)",
            "    same = [c for c in space if set(c.to_dict()) == set(want.to_dict())]",
            "    return nearest(same or space, want)",
            "",
            "",
            "def default(shape, dtype, device):",
        ]

        def emit(node: Node, depth: int) -> None:
            pad = "    " * depth
            if node.template is HAND:
                lines.append(f"{pad}return hand_default(shape, dtype, device)  # {node.n} swept shape"
                             f"{'s' if node.n != 1 else ''}")
                return
            if node.template is not None:
                lines.append(f"{pad}return _landed(shape, dtype, device, {node.template.code()})  "
                             f"# {node.n} swept shape{'s' if node.n != 1 else ''}")
                return
            lines.append(f"{pad}if {node.feature.expr} <= {node.threshold:.6g}:  # {node.feature.name}")
            emit(node.left, depth + 1)
            lines.append(f"{pad}else:")
            emit(node.right, depth + 1)

        emit(self.root, 1)
        if uses_hand and self.folder:
            lines += ["", "", f"# -- the hand-written rule, as kernels/{self.kernel}/heuristic.py has it (comments "
                      "dropped) --", _hand_source(self.hand)]
        elif uses_hand:
            lines += ["", "", *_spec_hand(self.kernel, self.hand)]
        return "\n".join(lines) + "\n"


def has_configs_module(spec) -> bool:
    """Whether ``from .configs import configs`` in the kernel's heuristic module reaches its space: a kernel folder
    (configs.py beside heuristic.py). An adopted kernel has neither: its space and rule are closures of adopt."""
    import inspect

    space, rule = inspect.unwrap(spec.configs), inspect.unwrap(spec.default)
    where = getattr(space, "__module__", None) or ""
    return (getattr(space, "__name__", "") == "configs" and where.endswith(".configs")
            and where.rpartition(".")[0] == (getattr(rule, "__module__", None) or "").rpartition(".")[0])


def _spec_space(kernel: str) -> list[str]:
    """The space of a kernel with no folder: its spec's, looked up by name when the rule runs (the editor's process
    has the spec: adopt registers every spec it makes under its name)."""
    return ["from flytune_nb import get_kernel", "", "",
            "def configs(shape, dtype, device):",
            f"    # {kernel} has no kernel folder (an adopted kernel): its pruned space is its spec's",
            f"    return get_kernel({kernel!r}).configs(shape, dtype, device)"]


def _spec_hand(kernel: str, hand) -> list[str]:
    """HAND leaves of a kernel with no folder: adopt's own rule (the first config its decorator keeps) is written
    out; a rule passed as adopt(default=...) is called through the spec, whose default it is."""
    import inspect

    if getattr(inspect.unwrap(hand), "first_of_space", False) if hand is not None else False:
        return ["def hand_default(shape, dtype, device):",
                "    # adopt's rule: the first config the decorator keeps for the shape",
                "    return configs(shape, dtype, device)[0]"]
    return ["def hand_default(shape, dtype, device):",
            f"    # {kernel}'s own rule (adopt's default=): write it out here before this rule becomes that default,",
            "    # or it calls itself",
            f"    return get_kernel({kernel!r}).default(shape, dtype, device)"]


def _hand_source(fn) -> str:
    """The hand rule's module with its ``default`` renamed ``hand_default`` (and its docstring dropped), so the
    emitted rule stands alone: saved over heuristic.py it does not import itself."""
    import ast
    import inspect

    module = inspect.getmodule(inspect.unwrap(fn))
    tree = ast.parse(inspect.getsource(module))
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    body = [n for n in body if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.FunctionDef) and node.name == "default":
            node.name = "hand_default"
        elif isinstance(node, ast.Name) and node.id == "default":
            node.id = "hand_default"
    return ast.unparse(ast.Module(body=body, type_ignores=[]))


class _Costs:
    """log(time / best) of every candidate template at every shape, computed once (a template's config at each
    shape is built once, not once per tree node): rows are templates, columns shapes. A template not timed at a
    shape costs that shape's slowest timed config (sweeps that search time the promising ones); ``seen`` says where
    it was timed."""

    def __init__(self, data: Sequence[ShapeTimes], templates: Sequence[Template], pick) -> None:
        import numpy as np

        self.np = np
        self.templates = list(templates)
        self.log = np.zeros((len(self.templates), len(data)))
        self.seen = np.zeros((len(self.templates), len(data)), dtype=bool)
        for j, s in enumerate(data):
            worst = math.log(s.worst / s.best)
            for i, t in enumerate(self.templates):
                r = s.ratio(pick(t, s))
                if r is None:
                    self.log[i, j] = worst
                else:
                    self.seen[i, j] = True
                    self.log[i, j] = math.log(r) if math.isfinite(r) else math.inf

    def leaf(self, cols, rows) -> tuple[float, Template | None]:
        """(summed log slowdown, template) of the best candidate (``rows``) over the shapes ``cols``; the HAND
        template, when a candidate, is kept unless another beats it by MIN_GAIN per shape."""
        np = self.np
        sub = self.log[np.ix_(rows, cols)].sum(axis=1)
        sub[~self.seen[np.ix_(rows, cols)].any(axis=1)] = np.inf
        if not len(rows) or not np.isfinite(sub).any():
            return math.inf, None
        k = int(np.argmin(sub))
        best, template = float(sub[k]), self.templates[rows[k]]
        hand = [i for i, r in enumerate(rows) if self.templates[r] is HAND]
        if hand and template is not HAND and np.isfinite(sub[hand[0]]) and \
                (len(cols) < MIN_SUPPORT or not best < float(sub[hand[0]]) - MIN_GAIN * len(cols)):
            return float(sub[hand[0]]), HAND
        return best, template


def _templates(data: Sequence[ShapeTimes], relative: dict) -> list[Template]:
    """The winners: every config within NEAR_BEST of its shape's best, as a template."""
    return list(dict.fromkeys(Template.of(c, s.shape, relative) for s in data for c, t in s.times.items()
                              if t <= NEAR_BEST * s.best))


def fit(data: Sequence[ShapeTimes], spec, device, *, features: Sequence[Feature] | None = None,
        relative: dict | None = None, max_depth: int = 3, min_leaf: int = 1, keep_hand: bool = True,
        _costs: "_Costs | None" = None, _train: Sequence[int] | None = None) -> Rule:
    """A tree of at most ``max_depth`` splits (leaves of at least ``min_leaf`` shapes) over ``features`` (the
    kernel's defaults if None), chosen greedily by the summed log slowdown. ``keep_hand``: the kernel's heuristic is
    a candidate at every leaf and is kept where no config beats it (the fit then states where the hand rule is
    wrong, and leaves it alone elsewhere); False fits a tree of configs only."""
    data = list(data)
    train = [j for j in (range(len(data)) if _train is None else _train) if math.isfinite(data[j].best)]
    if not train:
        raise FitError(f"{spec.name}: no sweep with a config that ran")
    features = list(features if features is not None else default_features(spec))
    relative = default_relative(spec) if relative is None else relative
    costs = _costs or _build_costs(data, spec, device, relative, keep_hand)
    winners = set(_templates([data[j] for j in train], relative))
    rows = [i for i, t in enumerate(costs.templates) if t in winners or (keep_hand and t is HAND)]
    values = {j: {f.name: f(data[j].shape, data[j].dtype, device) for f in features} for j in train}

    def grow(cols: list[int], depth: int) -> Node:
        cost, template = costs.leaf(cols, rows)
        node = Node(template=template, n=len(cols))
        if depth >= max_depth or len(cols) < 2 * min_leaf:
            return node if template is not None else split_all(cols)
        best = None
        for f in features:
            xs = sorted({values[j][f.name] for j in cols})
            for lo, hi in zip(xs, xs[1:]):
                thr = (lo + hi) / 2
                left = [j for j in cols if values[j][f.name] <= thr]
                right = [j for j in cols if values[j][f.name] > thr]
                if len(left) < min_leaf or len(right) < min_leaf:
                    continue
                c = costs.leaf(left, rows)[0] + costs.leaf(right, rows)[0]
                if best is None or c < best[0]:
                    best = (c, f, thr, left, right)
        if best is None or not (best[0] < cost - MIN_GAIN * len(cols)):
            return node if template is not None else split_all(cols)
        _, f, thr, left, right = best
        return Node(feature=f, threshold=thr, left=grow(left, depth + 1), right=grow(right, depth + 1), n=len(cols))

    def split_all(cols):  # no template covers these shapes together: each keeps its own best
        cols = sorted(cols, key=lambda j: values[j][features[0].name])
        if len(cols) == 1:
            return Node(template=costs.leaf(cols, rows)[1], n=1)
        mid = len(cols) // 2
        thr = (values[cols[mid - 1]][features[0].name] + values[cols[mid]][features[0].name]) / 2
        return Node(feature=features[0], threshold=thr, left=split_all(cols[:mid]), right=split_all(cols[mid:]),
                    n=len(cols))

    return Rule(grow(train, 0), spec.name, features, hand=spec.default, folder=has_configs_module(spec))


def _build_costs(data, spec, device, relative, keep_hand) -> _Costs:
    hand = {id(s): spec.canonical(spec.default(dict(s.shape), s.dtype, device)) for s in data} if keep_hand else {}

    def pick(t: Template, s: ShapeTimes) -> Config:
        return hand[id(s)] if t is HAND else t.at(s.shape)

    return _Costs(data, ([HAND] if keep_hand else []) + _templates(data, relative), pick)


# -- scoring -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Held:
    """One held-out shape: the fitted rule's and the hand rule's slowdown there (None: the store never timed the
    pick)."""
    shape: dict
    dtype: str
    fitted: float | None
    hand: float | None
    fitted_config: Config
    hand_config: Config


@dataclass
class Validation:
    rows: list = field(default_factory=list)

    def summary(self) -> dict:
        both = [r for r in self.rows if r.fitted is not None and r.hand is not None]
        return {"shapes": len(self.rows), "compared": len(both),
                "fitted_unmeasured": sum(r.fitted is None for r in self.rows),
                "hand_unmeasured": sum(r.hand is None for r in self.rows),
                "fitted_regret": regret(r.fitted for r in both), "hand_regret": regret(r.hand for r in both),
                "fitted_worst": max((r.fitted for r in both), default=math.nan),
                "hand_worst": max((r.hand for r in both), default=math.nan)}


def landed(spec, config: Config, shape, dtype, device) -> Config:
    """``config`` as the emitted rule lands it on the space (same knob names first, then nearest)."""
    from flytune_nb.kit.spaces import nearest

    space = spec.configs(shape, dtype, device)
    want = spec.canonical(config)
    same = [c for c in space if set(c.to_dict()) == set(want.to_dict())]
    return nearest(same or space, want)


def cross_validate(data: Sequence[ShapeTimes], spec, device, *, group_by: Sequence[str] | None = None,
                   hand: Callable | None = None, land: bool = True, **fit_kwargs) -> Validation:
    """Hold out each group of shapes (same values of ``group_by``; default: every non-batch axis, so a fold is one
    model shape at all its batch sizes; () holds out one shape at a time), fit on the rest, and score both the
    fitted rule and ``hand`` (the kernel's heuristic by default) on the held-out shapes. ``land``: put the fitted
    pick through the kernel's space first, as the emitted code does (off for stores swept over another space)."""
    hand = hand or spec.default
    group_by = tuple(a for a in spec.axes if a != spec.batch_axis) if group_by is None else tuple(group_by)
    groups: dict = defaultdict(list)
    for i, s in enumerate(list(data)):
        groups[(s.dtype, *(s.shape[a] for a in group_by)) if group_by else i].append(s)
    out = Validation()
    data = list(data)
    keep_hand = fit_kwargs.get("keep_hand", True)
    relative = fit_kwargs.get("relative")
    costs = _build_costs(data, spec, device, default_relative(spec) if relative is None else relative, keep_hand)
    for key, held in groups.items():
        train = [j for j, s in enumerate(data) if all(s is not h for h in held)]
        if not train:
            continue
        rule = fit(data, spec, device, _costs=costs, _train=train, **fit_kwargs)
        for s in held:
            pick = rule.predict(s.shape, s.dtype, device)
            if land and rule.root.leaf_for(s.shape, s.dtype, device).template is not HAND:
                pick = landed(spec, pick, s.shape, s.dtype, device)
            mine = spec.canonical(hand(dict(s.shape), s.dtype, device))
            out.rows.append(Held(dict(s.shape), s.dtype, s.ratio(spec.canonical(pick)), s.ratio(mine),
                                 spec.canonical(pick), mine))
    return out
