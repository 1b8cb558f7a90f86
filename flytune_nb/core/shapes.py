"""Shape grids: ``"M=1,64,4096 N=4096,8192"`` -> the cartesian product as shape dicts.

Presets: ``M=sglang`` expands to SGLang's default tuning batch sizes. Any mistake gives one GridError line that says
what was expected.

Shape rules: what a kernel cannot run whatever its config (``topk <= E``: a token is routed to topk distinct
experts), declared by the kernel (KernelSpec.shape_rules) and checked with its axes, before anything is compiled.
"""
from __future__ import annotations

import ast
import difflib
import itertools
import json
import operator
import re
from collections.abc import Mapping

from flytune_nb.errors import UsageError

SGLANG_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
PRESETS = {"sglang": SGLANG_BATCH_SIZES}


class GridError(UsageError):
    pass


def shape_text(shape: dict) -> str:
    """``{"M": 4, "N": 1024}`` -> ``"M=4 N=1024"``: a shape as the grid syntax writes it."""
    return " ".join(f"{k}={v}" for k, v in shape.items())


def grid_size_text(n_shapes: int, n_dtypes: int) -> str:
    """``"2 shapes x 1 dtype"``: how big a sweep's grid is, as the CLI and the workbench say it."""
    return f"{n_shapes} shape{'s' if n_shapes != 1 else ''} x {n_dtypes} dtype{'s' if n_dtypes != 1 else ''}"


def parse_values(axis: str, text: str, batch_axis: str | None = None) -> list[int]:
    """One axis' values. A preset is batch sizes: with the kernel's ``batch_axis`` known, it is refused on any other
    axis (``N=sglang`` would sweep hidden sizes 1 ... 4096, which no model has)."""
    text = text.strip()
    if text.lower() in PRESETS:
        if batch_axis is not None and axis != batch_axis:
            raise GridError(f"axis {axis}: {text!r} is a list of batch sizes, for the batch axis {batch_axis} "
                            f"(write e.g. {batch_axis}={text.lower()} {axis}=4096)")
        return list(PRESETS[text.lower()])
    values = []
    parts = [p.strip() for p in text.split(",")]
    if parts and not parts[-1]:
        parts.pop()  # one trailing comma is harmless
    for part in parts:
        if not part:  # "1,,4": a value was lost, not written twice
            raise GridError(f"axis {axis}: empty value in {text!r} (write e.g. {axis}=1,64,4096)")
        if not re.fullmatch(r"[0-9]+", part):  # not \d: it takes other scripts' digits too
            raise GridError(f"axis {axis}: {part!r} is not a positive integer (write e.g. {axis}=1,64,4096)")
        try:
            v = int(part)
        except ValueError:  # past sys.get_int_max_str_digits() (4300 by default) Python refuses to read it
            raise GridError(f"axis {axis}: a value of {len(part)} digits is too large to be a size") from None
        if v < 1:
            raise GridError(f"axis {axis}: sizes must be >= 1, got {v}")
        values.append(v)
    if not values:
        raise GridError(f"axis {axis} has no values (write e.g. {axis}=1,64,4096)")
    return list(dict.fromkeys(values))


def split_known(grid: str | dict, axes: tuple[str, ...], *, noun: str = "grid") -> tuple[dict[str, str], list[str]]:
    """Grid text (``"M=1,64 N=4096"``) or ``{axis: "1,64" | [1, 64]}`` -> ({axis: value text} for the well-formed
    terms of the kernel's axes, [what is wrong with each other term]). The workbench keeps the first part and shows
    the second; ``split_axes`` refuses any problem. ``noun`` names the input in the messages ("shape" for a
    lookup's one shape)."""
    per_axis: dict[str, str] = {}
    problems: list[str] = []
    if isinstance(grid, str) and grid.lstrip().startswith("{"):
        # a dict written as JSON text (papermill's -p passes it as text; -y would pass a dict): read as the dict
        try:
            grid = json.loads(grid)
        except ValueError as e:
            return {}, [f"{noun} {grid!r} starts like a JSON object but is not one ({e}); write "
                        f"\"M=1,64 N=4096\" or a valid {{\"M\": \"1,64\", \"N\": \"4096\"}}"]
        if not isinstance(grid, dict):
            return {}, [f"{noun} must be text like \"M=1,64 N=4096\" or an object of axes"]
    if isinstance(grid, dict):
        terms = [(str(a), ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v), None)
                 for a, v in grid.items()]
    else:
        terms = [(*t.partition("=")[::2], t) for t in str(grid).replace(";", " ").split()]
    for axis, values, token in terms:
        if token is not None and ("=" not in token or not axis):
            form = "AXIS=v1,v2,... (e.g. \"M=1,64 N=4096\")" if noun == "grid" else "AXIS=value (e.g. \"M=37\")"
            problems.append(f"{noun} term {token!r} is not {form}")
        elif axis in per_axis:
            problems.append(f"axis {axis} given twice in the {noun}")
        elif axis not in axes:
            close = difflib.get_close_matches(axis, axes, n=1) or [a for a in axes if a.lower() == axis.lower()]
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{noun} may only set the kernel's axes {list(axes)}; unknown ['{axis}']{hint}")
        else:
            per_axis[axis] = values
    return per_axis, problems


def split_axes(grid: str | dict, axes: tuple[str, ...], *, noun: str = "grid") -> dict[str, str]:
    """``split_known`` with every problem refused: a malformed term, an axis given twice or an axis the kernel does
    not have is a GridError, never dropped silently (a typo'd ``n=1024`` must not run N=4096)."""
    per_axis, problems = split_known(grid, axes, noun=noun)
    if problems:
        raise GridError(problems[0])
    return per_axis


def parse_grid(text: str | dict, axes: tuple[str, ...], *, noun: str = "grid",
               batch_axis: str | None = None) -> list[dict[str, int]]:
    """Grid text or ``{axis: [values]}`` -> list of shapes, every axis present exactly once. ``batch_axis``: the
    kernel's (KernelSpec.batch_axis), the one axis a preset may set."""
    per_axis = {a: parse_values(a, v, batch_axis) for a, v in split_axes(text, axes, noun=noun).items()}
    missing = [a for a in axes if a not in per_axis]
    if missing:
        raise GridError(f"{noun} must set each of the kernel's axes {list(axes)}; missing {missing}")
    combos = itertools.product(*(per_axis[a] for a in axes))
    return [dict(zip(axes, c)) for c in combos]


def grid_shapes(grid, axes: tuple[str, ...], batch_axis: str | None = None) -> list[dict]:
    """What a sweep or a census takes as its grid: text, ``{axis: values}`` (both through parse_grid), or a sequence
    of shape dicts. Anything else is one GridError, not a TypeError from deep inside (papermill passes
    ``-p grid 5`` as an int)."""
    if isinstance(grid, (str, dict)):
        return parse_grid(grid, axes, batch_axis=batch_axis)
    what = ("grid must be text like 'M=1,64 N=4096', a dict of axis -> values, or a list of shape dicts; "
            f"got {type(grid).__name__} {grid!r}")
    try:
        shapes = list(grid)
    except TypeError:
        raise GridError(what) from None
    if not all(isinstance(s, Mapping) for s in shapes):
        raise GridError(what)
    return [dict(s) for s in shapes]


# A shape rule compares sizes of the kernel's axes: "topk <= E", "N % 16 == 0", "M * topk >= E". Read by this small
# evaluator, never by eval(): a rule comes from a kernel folder's data file and must not be able to run code.
_RULE_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Mod: operator.mod}
# Parts (axis names, numbers) a rule may have: its tree is read recursively, once per part, and a sum of ~1000
# parts reaches Python's recursion limit (1000) there, of ~3000 already in ast.parse. A real rule has a handful.
RULE_PARTS = 100
_RULE_PART = re.compile(r"\w+")
_RULE_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                 ast.Eq: operator.eq, ast.NotEq: operator.ne}


class ShapeRuleError(UsageError):
    """A shape that breaks one of its kernel's shape rules: ``shape``, ``rule``, ``why`` kept apart, so that a caller
    with a context of its own (the audit's ``--shape``) can say it in its words."""

    def __init__(self, kernel: str, shape: dict, rule: str, why: str):
        self.kernel, self.shape, self.rule, self.why = kernel, dict(shape), rule, why
        super().__init__(f"{kernel}: shape {shape_text(shape)} {self.reason}")

    @property
    def reason(self) -> str:
        return f"breaks the rule {self.rule}" + (f": {self.why}" if self.why else "")


def parse_rule(rule: str, axes: tuple[str, ...]) -> ast.Expression:
    """A rule's syntax tree, checked: one comparison (chains allowed, ``1 <= topk <= E``) of integers and the
    kernel's axes under + - * // %. Anything else is a UsageError naming the rule."""
    if not isinstance(rule, str) or not rule.strip():
        raise UsageError(f"a shape rule is text such as 'topk <= E', got {rule!r}")
    if len(_RULE_PART.findall(rule)) > RULE_PARTS:
        raise UsageError(f"shape rule {rule[:40]!r}... has more than {RULE_PARTS} parts; split it into rules of its "
                         f"own")
    try:
        tree = ast.parse(rule.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise UsageError(f"shape rule {rule!r} is not a comparison such as 'topk <= E'") from None
    if not isinstance(tree.body, ast.Compare):
        raise UsageError(f"shape rule {rule!r} is not a comparison such as 'topk <= E'")
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Compare) and node is not tree.body:  # rule_holds reads operands as numbers only
            raise UsageError(f"shape rule {rule!r} compares inside a comparison; write each comparison as a rule "
                             f"of its own")
        if isinstance(node, ast.Name):
            if node.id not in axes:
                raise UsageError(f"shape rule {rule!r} names {node.id!r}, not one of the axes {list(axes)}")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int):
                raise UsageError(f"shape rule {rule!r}: {node.value!r} is not a whole number")
        elif not isinstance(node, (ast.Compare, ast.BinOp, ast.Load, *_RULE_OPS, *_RULE_COMPARE)):
            raise UsageError(f"shape rule {rule!r} may only compare axes and whole numbers under + - * // %")
    return tree


def rule_holds(tree: ast.Expression, shape: Mapping[str, int]) -> bool:
    """Whether a shape (every axis present) meets a rule parsed by ``parse_rule``. A // or % by zero breaks it."""
    def value(node):
        if isinstance(node, ast.Name):
            return int(shape[node.id])
        if isinstance(node, ast.Constant):
            return node.value
        return _RULE_OPS[type(node.op)](value(node.left), value(node.right))

    body = tree.body
    try:
        left = value(body.left)
        for op, node in zip(body.ops, body.comparators):
            right = value(node)
            if not _RULE_COMPARE[type(op)](left, right):
                return False
            left = right
    except ZeroDivisionError:
        return False
    return True
