"""The input names a kernel reads, so that ``tuned(...)`` can refuse a call passing any other.

A misspelled optional input (``epsilon=`` for ``eps``, ``output=`` for ``out``) is otherwise ignored without a word:
the kernel runs with its default eps, or writes a new tensor while the caller's buffer stays unwritten. The names are
read from the bytecode of the spec's functions rather than declared in kernel folders: a kernel folder's code is
fingerprinted into its tuning key, so a declaration there would make every committed export of it stale.

Read, in the functions that take a call's inputs (``run``, ``reference``, ``shape_of``, ``baseline``: the readers),
their nested functions and lambdas, and the functions of the same top-level package they pass the inputs on to (to a
depth of three calls):
- the literal keys read from the inputs mapping: ``inputs["x"]``, ``inputs.get("eps", EPS)``, ``"out" in inputs``;
- a key that is not a literal (``inputs[k] for k in ("x", "w1")``): then every string constant of that code, of the
  module-level strings and string tuples it names, counts as a name;
- a use that names nothing: ``fn(**inputs)``, ``for k in inputs``, ``inputs.items()``, the mapping passed whole to a
  function that is not followed (another package's, a method), stored or returned. Then nothing can be said about the
  names, and no call is refused. So is it for code these rules do not recognise: a missed check costs what it cost
  before, a wrong refusal would stop a correct call.
What ``make_inputs`` makes counts too (it may always be passed back): the literal keys of its dict, else its string
constants less the shape axes; so do ``outputs``, ``mutates``, ``zeroes`` and ``dtype_from``. A spec that declares
``input_names`` is read from that instead (flytune_nb.adopt declares them: its ``run`` passes the inputs to the user's
launch function, out of sight).
"""
from __future__ import annotations

import builtins
import difflib
import dis
import functools
import inspect
import types
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from flytune_nb.errors import UsageError

DEPTH = 3  # calls followed from a reader into the functions it passes the inputs to
_LISTED_AT_MOST = 24
# Instructions that push a local's value (3.10-3.14 spellings; the two-name forms push two values)
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_FAST_BORROW", "LOAD_FAST_LOAD_FAST",
                    "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})
# Instructions that push without popping: what may stand between an argument and its call, or a key and its subscript
_PURE_PUSH = frozenset({"LOAD_CONST", "LOAD_SMALL_INT", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_GLOBAL",
                        "LOAD_NAME", "LOAD_FAST_BORROW", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
                        "LOAD_CLOSURE", "PUSH_NULL"})
_NEUTRAL = frozenset({"NOP", "EXTENDED_ARG", "CACHE", "KW_NAMES", "RESUME", "NOT_TAKEN"})
_KEY_METHODS = frozenset({"get", "pop", "setdefault", "__getitem__", "__contains__"})
_SUBSCRIPTS = frozenset({"BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR"})
# A value consumed by one of these is only compared or tested, never read for names
_TESTS = frozenset({"IS_OP", "COMPARE_OP", "TO_BOOL", "UNARY_NOT", "POP_TOP"})
# Calls by the number of stack entries above their arguments: kwnames tuple on the stack (3.10's CALL_FUNCTION_KW,
# 3.13's CALL_KW) or not
_CALLS = {"CALL": 0, "PRECALL": 0, "CALL_FUNCTION": 0, "CALL_METHOD": 0, "CALL_FUNCTION_KW": 1, "CALL_KW": 1}
_STOPS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
                    "JUMP_ABSOLUTE", "JUMP", "JUMP_NO_INTERRUPT", "JUMP_BACKWARD_NO_INTERRUPT"})
_PRECALL = "PRECALL" in dis.opmap  # 3.11
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs) | frozenset(getattr(dis, "hasjump", ()))


@dataclass(frozen=True)
class InputNames:
    """What a spec's code shows of the names a call may pass."""

    known: frozenset  # every name a call may pass
    listed: tuple  # the names a message shows, sorted
    unknowable: str = ""  # why nothing can be said (then no call is refused), or ""

    def unknown(self, given: Iterable[str]) -> list[str]:
        """The names of ``given`` the kernel does not read; none when nothing can be said, or when not one of
        ``given`` is known (code that reads its inputs in a way these rules do not see names none of them)."""
        if self.unknowable:
            return []
        given = list(given)
        if not any(name in self.known for name in given):
            return []
        return [name for name in given if name not in self.known]


def check_call(spec, given: Iterable[str]) -> None:
    """UsageError naming every input of a call that ``spec``'s kernel does not read, with the closest name it does."""
    names = of_spec(spec)
    unknown = names.unknown(given)
    if not unknown:
        return
    pool = names.listed or sorted(n for n in names.known if isinstance(n, str) and n.isidentifier())
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), pool, n=1) if isinstance(name, str) else []
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    listed = list(names.listed[:_LISTED_AT_MOST]) + (["…"] if len(names.listed) > _LISTED_AT_MOST else [])
    reads = f"; it reads: {', '.join(listed)}" if listed else ""
    raise UsageError(f"{spec.name}: no input{'s' if len(unknown) > 1 else ''} named {', '.join(parts)}{reads}")


# -- per spec, cached ------------------------------------------------------------------------------------------------
# KernelSpec is a frozen dataclass holding dicts, so it cannot be a dict key: its id, with a weak reference that
# empties the entry when the spec goes (and tells a reused id from the spec it was).
_BY_SPEC: dict[int, tuple[weakref.ref, InputNames]] = {}


def of_spec(spec) -> InputNames:
    """The names ``spec``'s kernel reads, computed once per spec."""
    key = id(spec)
    hit = _BY_SPEC.get(key)
    if hit is not None and hit[0]() is spec:
        return hit[1]
    try:
        names = _of_spec(spec)
    except Exception as e:  # noqa: BLE001 - a reading this module got wrong must not stop a call: no name is refused
        names = InputNames(frozenset(), (), f"its code could not be read ({type(e).__name__}: {e})")
    _BY_SPEC[key] = (weakref.ref(spec, lambda _ref: _BY_SPEC.pop(key, None)), names)
    return names


def _of_spec(spec) -> InputNames:
    own = {n for n in (*spec.outputs, *spec.mutates, *spec.zeroes, spec.dtype_from) if n}
    declared = tuple(getattr(spec, "input_names", ()) or ())
    if declared:
        return InputNames(frozenset(declared) | own, tuple(sorted(set(declared) | own)))
    readers = [(f, 0) for f in (spec.run, spec.reference, spec.shape_of, spec.baseline) if f is not None]
    return read(readers, [spec.make_inputs] if spec.make_inputs is not None else [], axes=spec.axes, also=own)


# -- reading code ----------------------------------------------------------------------------------------------------
@dataclass
class _Reading:
    keys: set = field(default_factory=set)  # literal keys read from the inputs (and made by make_inputs)
    strings: set = field(default_factory=set)  # every string constant of the code read
    loose: bool = False  # a key that is not a literal was read: every string counts
    why: str = ""  # the first use that names nothing
    seen: set = field(default_factory=set)

    def unknowable(self, why: str) -> None:
        self.why = self.why or why


def read(readers: Sequence[tuple[Callable, int]], makers: Sequence[Callable] = (), *, axes: Sequence[str] = (),
         also: Iterable[str] = ()) -> InputNames:
    """The names read by ``readers`` (each a function and the position of its inputs parameter) and made by
    ``makers`` (functions returning an inputs dict), plus ``also``."""
    r = _Reading()
    for fn, position in readers:
        _read_function(fn, position, r)
    made = _Reading()
    for fn in makers:
        _read_function(fn, None, made)
    also = {n for n in also if n}
    # What make_inputs makes, where its dict's keys are literals; else its strings (a dict built another way), less
    # the axes it reads from the shape
    made_names = made.keys or {n for n in made.strings if n.isidentifier() and n not in axes}
    loose = {n for n in r.strings if n.isidentifier() and n not in axes} if r.loose else set()
    known = r.keys | loose | made_names | also
    listed = sorted(n for n in (r.keys | made.keys | also) if isinstance(n, str))
    if not listed:
        listed = sorted(n for n in known if isinstance(n, str) and n.isidentifier() and n not in axes)
    return InputNames(frozenset(known), tuple(listed), r.why)


def _label(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _unwrap(fn, position: int | None, r: _Reading):
    """(a plain function, the position of its inputs parameter), or (None, None) for one that cannot be read."""
    for _ in range(16):
        if isinstance(fn, functools.partial):
            r.strings.update(_strings_of([*fn.args, *fn.keywords.values()]))
            position = None if position is None else position + len(fn.args)
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            position = None if position is None else position + 1
            fn = fn.__func__
        elif getattr(fn, "__wrapped__", None) is not None and not isinstance(fn, type):
            try:
                fn = inspect.unwrap(fn)
            except ValueError:  # a __wrapped__ cycle
                return None, None
        elif isinstance(fn, types.FunctionType):
            return fn, position
        elif callable(fn) and isinstance(getattr(type(fn), "__call__", None), types.FunctionType):
            position = None if position is None else position + 1
            fn = type(fn).__call__
        else:
            return None, None
    return None, None


def _read_function(fn, position: int | None, r: _Reading, depth: int = 0, watched: frozenset | None = None) -> None:
    """Read ``fn``: as a reader when ``position`` (its inputs parameter) or ``watched`` (names of its parameters that
    hold the inputs) says which variable holds the inputs; for its string constants only (a maker) otherwise."""
    label = _label(fn)
    fn, position = _unwrap(fn, position, r)
    if fn is None:
        if position is not None or watched:
            r.unknowable(f"{label} is not Python code that can be read")
        return
    code = fn.__code__
    if position is not None:
        params = code.co_varnames[:code.co_argcount]
        if position >= len(params):  # the inputs go to *args
            r.unknowable(f"{label} takes the inputs as *args")
            return
        watched = frozenset({params[position]})
    key = (code, watched)
    if key in r.seen:
        return
    r.seen.add(key)
    r.strings.update(_strings_of([*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]))
    cells = {name: c.cell_contents for name, c in zip(code.co_freevars, fn.__closure__ or ()) if _filled(c)}
    r.strings.update(_strings_of(v for v in cells.values() if not callable(v)))
    _read_code(code, fn, cells, r, depth, watched or frozenset(), maker=position is None and not watched)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _strings_of(values) -> set:
    out = set()
    for v in values:
        if isinstance(v, str):
            out.add(v)
        elif isinstance(v, (tuple, frozenset)) and len(v) <= 256:
            out.update(_strings_of(v))
    return out


def _read_code(code, fn, cells: dict, r: _Reading, depth: int, watched: frozenset, maker: bool) -> None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a lambda, a nested function, a comprehension: the same variables
            _read_code(const, fn, {}, r, depth, watched, maker)
        else:
            r.strings.update(_strings_of([const]))
    for name in code.co_names:  # module-level strings and string tuples it names (NAMES = ("x", "w"))
        value = fn.__globals__.get(name)
        if isinstance(value, (str, tuple, frozenset)):
            r.strings.update(_strings_of([value]))
    try:
        ins = list(dis.get_instructions(code))
        depths = _depths(code, ins)
    except Exception:  # noqa: BLE001 - bytecode this module does not understand: nothing can be said
        if watched:
            r.unknowable(f"{code.co_name}: its bytecode could not be read")
        return
    if maker:
        _made_keys(ins, depths, r)
        return
    if not watched:
        return
    for j, i in enumerate(ins):
        if i.opname == "STORE_FAST_LOAD_FAST":  # 3.13+: stores one local, then pushes another (in a comprehension)
            loaded = i.argval[1] if isinstance(i.argval, tuple) else None
            if loaded in watched:
                if depths[j] is None:
                    r.unknowable(f"{code.co_name}: its bytecode could not be read")
                else:
                    _use(ins, depths, j, depths[j] - 1, True, fn, cells, code, r, depth, watched)
            continue
        if i.opname not in _LOADS:
            # another push of a local (a later Python's spelling): missed, its reads would go unseen and a call
            # passing the names it reads would be refused
            if i.opname.startswith(("LOAD_FAST", "LOAD_DEREF")) \
                    and set(i.argval if isinstance(i.argval, tuple) else (i.argval,)) & watched:
                r.unknowable(f"{_where(code, ins, j)} loads the inputs with {i.opname}, which is not read")
            continue
        names = i.argval if isinstance(i.argval, tuple) else (i.argval,)
        for k, name in enumerate(names):
            if name in watched and depths[j] is not None:
                _use(ins, depths, j, depths[j] + k, k == len(names) - 1, fn, cells, code, r, depth, watched)
            elif name in watched:
                r.unknowable(f"{code.co_name}: its bytecode could not be read")


def _depths(code, ins) -> list:
    """The stack depth before each instruction (None where no path reaches it), as the compiler computes it."""
    at = {x.offset: n for n, x in enumerate(ins)}
    depth: list = [None] * len(ins)
    todo = [(0, 0)]
    for entry in getattr(dis.Bytecode(code), "exception_entries", ()):  # handlers: (3.11+) the table says the depth
        if entry.target in at:
            todo.append((at[entry.target], entry.depth + (1 if entry.lasti else 0) + 1))
    while todo:
        n, d = todo.pop()
        while n < len(ins) and depth[n] is None:
            depth[n] = d
            x = ins[n]
            if x.opcode in _JUMPS and isinstance(x.argval, int) and x.argval in at:
                todo.append((at[x.argval], d + _effect(x, jump=True)))
            if x.opname in _STOPS:
                break
            # never below empty: 3.11 counts a generator's RETURN_GENERATOR as pushing nothing, then pops its value
            d = max(0, d + _effect(x, jump=False))
            n += 1
    return depth


def _effect(x, jump: bool) -> int:
    try:
        return dis.stack_effect(x.opcode, x.arg if x.opcode >= dis.HAVE_ARGUMENT else None, jump=jump)
    except ValueError:  # an instruction whose argument is not where HAVE_ARGUMENT says
        return dis.stack_effect(x.opcode, None if x.opcode >= dis.HAVE_ARGUMENT else x.arg, jump=jump)


def _made_keys(ins, depths, r: _Reading) -> None:
    """Keys make_inputs writes: ``{"x": ..., "w": ...}`` and ``inputs["w_scale"] = ...``."""
    for j, i in enumerate(ins):
        if i.opname == "BUILD_CONST_KEY_MAP" and j and isinstance(ins[j - 1].argval, tuple):
            r.keys.update(k for k in ins[j - 1].argval if isinstance(k, str))
        elif i.opname == "STORE_SUBSCR" and j and isinstance(ins[j - 1].argval, str) \
                and ins[j - 1].opname == "LOAD_CONST":
            r.keys.add(ins[j - 1].argval)
        elif i.opname == "BUILD_MAP" and i.arg and depths[j] is not None:
            for pair in range(i.arg):  # each key is the value pushed at its slot
                p = _pusher(ins, depths, j, depths[j] - 2 * i.arg + 2 * pair)
                if p is not None and ins[p].opname == "LOAD_CONST" and isinstance(ins[p].argval, str):
                    r.keys.add(ins[p].argval)


def _pusher(ins, depths, before: int, slot: int) -> int | None:
    """The instruction, before index ``before``, that pushed what is at ``slot`` there (a push-only one), or None."""
    for n in range(before - 1, -1, -1):
        d = depths[n]
        if d is None:
            return None
        if d <= slot:
            return n if d == slot and ins[n].opname in _PURE_PUSH else None
    return None


def _where(code, ins, j: int) -> str:
    line = None
    for x in ins[j::-1]:
        positions = getattr(x, "positions", None)
        line = getattr(positions, "lineno", None) or getattr(x, "starts_line", None)
        if isinstance(line, int):
            break
    return f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}, line {line})"


def _next(ins, n: int) -> int:
    while n < len(ins) and ins[n].opname in _NEUTRAL:
        n += 1
    return n


def _use(ins, depths, j, slot, on_top, fn, cells, code, r: _Reading, depth, watched) -> None:
    """Classify one load of the inputs variable (at stack ``slot``): a keyed read, a test, a call that follows, or
    a use that names nothing."""
    where = _where(code, ins, j)
    a = _next(ins, j + 1)
    nxt = ins[a] if a < len(ins) else None
    if on_top and nxt is not None:
        if nxt.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            if nxt.argval in _KEY_METHODS:
                b = _next(ins, a + 1)
                if b < len(ins) and ins[b].opname == "LOAD_CONST" and isinstance(ins[b].argval, str):
                    r.keys.add(ins[b].argval)
                else:
                    r.loose = True
            else:  # .items(), .keys(), .values(), .copy(), ...
                r.unknowable(f"{where} reads inputs.{nxt.argval}")
            return
        if nxt.opname == "CONTAINS_OP":  # "out" in inputs
            p = _pusher(ins, depths, j, slot - 1)
            if p is not None and ins[p].opname == "LOAD_CONST" and isinstance(ins[p].argval, str):
                r.keys.add(ins[p].argval)
            else:
                r.loose = True
            return
        if nxt.opname in _TESTS or nxt.opname.startswith("POP_JUMP"):
            return
    # What consumes the slot: a call it is an argument of, a subscript it is the container of, a closure it is a
    # cell of. Anything else that reaches down to it (an instruction this module does not know the pops of, too)
    # is a use that names nothing.
    n = j + 1
    while n < len(ins):
        d, x = depths[n], ins[n]
        if d is None:
            break
        if x.opname in _CALLS:
            base = d - x.arg - _CALLS[x.opname]
            if base <= slot < d:
                _call(ins, depths, n, base, slot, fn, cells, r, depth, watched, where)
                return
        elif (x.opname in _SUBSCRIPTS or (x.opname == "BINARY_OP" and x.argrepr == "[]")) and d - 2 == slot:
            p = _pusher(ins, depths, n, slot + 1)
            key = ins[p].argval if p is not None and ins[p].opname == "LOAD_CONST" else None
            if isinstance(key, str):
                r.keys.add(key)
            else:
                r.loose = True
            return
        elif x.opname == "BUILD_TUPLE" and d - x.arg <= slot:  # a closure's cells (3.13), then MAKE_FUNCTION
            c = _next(ins, n + 1)
            if c + 1 < len(ins) and isinstance(ins[c].argval, types.CodeType) \
                    and ins[c + 1].opname == "MAKE_FUNCTION":
                return
        pops = _pops(x)
        if pops is None or d - pops <= slot:
            if x.opname in _TESTS and pops is not None:  # inputs is None, inputs == other
                return
            break
        n += 1
    r.unknowable(f"{where} passes the inputs on whole ({ins[n].opname if n < len(ins) else 'at the end'})")


def _pops(x) -> int | None:
    """How many stack entries ``x`` takes (it may push others), for the instructions a call's arguments are made
    of; None for any other."""
    name, arg = x.opname, x.arg or 0
    if name in _PURE_PUSH or name in _NEUTRAL:
        return 0
    if name in ("BINARY_SUBSCR", "BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BINARY_SLICE"):
        return 2
    if name in ("LOAD_ATTR", "LOAD_METHOD", "TO_BOOL", "UNARY_NOT", "UNARY_NEGATIVE", "UNARY_INVERT", "GET_ITER",
                "FORMAT_SIMPLE", "POP_TOP") or name.startswith("POP_JUMP"):
        return 1
    if name in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING", "BUILD_SLICE"):
        return arg
    if name == "BUILD_MAP":
        return 2 * arg
    if name == "BUILD_CONST_KEY_MAP":
        return arg + 1
    if name in ("FORMAT_VALUE", "FORMAT_WITH_SPEC", "CONVERT_VALUE", "CALL_INTRINSIC_1"):
        return 2 if name == "FORMAT_WITH_SPEC" or (name == "FORMAT_VALUE" and arg & 4) else 1
    if name in ("JUMP_FORWARD", "JUMP", "JUMP_NO_INTERRUPT"):
        return 0
    if name in _CALLS:
        # 3.11 counts a call as PRECALL (the arguments) and CALL (the callable's two entries); 3.10's CALL_FUNCTION
        # takes the callable and the arguments, its CALL_METHOD and 3.12+'s CALL a self-or-NULL entry too; a kwnames
        # tuple on the stack is one more
        if name == "PRECALL":
            return arg
        if name == "CALL" and _PRECALL:
            return 2
        return arg + (1 if name.startswith("CALL_FUNCTION") else 2) + _CALLS[name]
    return None


def _call(ins, depths, n, base, slot, fn, cells, r: _Reading, depth, watched, where) -> None:
    """The inputs are an argument of the call at ``n`` whose arguments start at stack ``base``: read the callee, when
    it is a function of the same top-level package named by a global, a closure cell or a module attribute."""
    first = n
    for m in range(n - 1, -1, -1):  # where the arguments start: no instruction of theirs reaches below ``base``
        pops = _pops(ins[m])
        if depths[m] is None or pops is None or depths[m] - pops < base:
            break
        first = m
    callee = _resolve(ins, first, fn, cells)
    top = (getattr(fn, "__module__", None) or "").split(".")[0]
    target, _ = _unwrap(callee, None, _Reading()) if callee is not None else (None, None)
    if target is None or (target.__module__ or "").split(".")[0] != top or not top:
        r.unknowable(f"{where} passes the inputs to {_label(callee) if callee is not None else 'a call'}, which is "
                     f"not read")
        return
    if depth >= DEPTH:
        r.unknowable(f"{where} passes the inputs more than {DEPTH} calls deep")
        return
    # A call with keyword arguments (CALL_KW, CALL_FUNCTION_KW; 3.12's KW_NAMES before its CALL) puts them last on
    # the stack, so a stack position no longer says which parameter takes the inputs (helper(cfg=c, d=inputs) would
    # read cfg): nothing is said rather than a wrong name refused.
    if _CALLS.get(ins[n].opname) == 1 or any(ins[m].opname == "KW_NAMES" for m in range(first, n)):
        r.unknowable(f"{where} passes the inputs to {_label(target)} in a call with keyword arguments")
        return
    params = target.__code__.co_varnames[:target.__code__.co_argcount + target.__code__.co_kwonlyargcount]
    position = slot - base
    names = {p for p in params if p in watched}
    if position < target.__code__.co_argcount and not isinstance(callee, (types.MethodType, functools.partial)):
        names.add(params[position])
    if not names:
        r.unknowable(f"{where} passes the inputs to {_label(target)} by keyword or *args")
        return
    _read_function(target, None, r, depth + 1, frozenset(names))


def _resolve(ins, first: int, fn, cells: dict):
    """The object loaded just before the arguments that start at ``first`` (the callee), or None."""
    m = first - 1
    while m >= 0 and ins[m].opname in _NEUTRAL | {"PUSH_NULL"}:
        m -= 1
    if m < 0:
        return None
    x = ins[m]
    if x.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        return fn.__globals__.get(x.argval, getattr(builtins, x.argval, None))
    if x.opname == "LOAD_DEREF":
        return cells.get(x.argval)
    if x.opname in ("LOAD_ATTR", "LOAD_METHOD") and m and ins[m - 1].opname in ("LOAD_GLOBAL", "LOAD_NAME"):
        owner = fn.__globals__.get(ins[m - 1].argval)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, x.argval, None)
    return None

