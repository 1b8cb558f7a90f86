"""The input-name reader's rules (flytune_nb.core.input_names.read) on small functions: the cases, torch-free, so
that they also run under every other Python found here (the reader reads bytecode, which each Python spells its own
way: 3.13 loads a comprehension's container with STORE_FAST_LOAD_FAST). Run as a script, ``python
input_name_rules.py REPO`` checks every case in a process that imports only the reader, and prints what fails."""
import json
import re
import sys

NAMES = ("x", "w")


def _reads_x_and_eps(inputs, config):
    return inputs["x"] * inputs.get("eps", 1e-6)


def _passes_on(inputs, config):
    return _reads_x_and_eps(inputs, config)


def _nested(inputs, config):
    def inner():
        return inputs["q"]

    return inner() if "out" in inputs else None


def _keys_by_name(inputs, config):
    return [inputs[k] for k in NAMES]


def _literal_and_by_name(inputs, config):
    return inputs["x"], [inputs[k] for k in ("w1", "w2")]


def _iterates(inputs, config):
    return [inputs[k] for k in inputs]


def _items(inputs, config):
    return {k: v for k, v in inputs.items()}


def _aliases(inputs, config):
    other = inputs
    return other["x"]


def _to_another_package(inputs, config):
    return json.dumps(inputs)


def _to_a_method(inputs, config):
    return config.launch(inputs)


def _d1(a):
    return _d2(a)


def _d2(b):
    return _d3(b)


def _d3(c):
    return _d4(c)


def _d4(d):
    return d["deep"]


def _deep(inputs, config):
    return _d1(inputs)


KNOWN = [
    (_reads_x_and_eps, {"x", "eps"}),
    (_passes_on, {"x", "eps"}),  # a function of this package it passes the inputs to is read too
    (lambda i, c: _reads_x_and_eps(i, c), {"x", "eps"}),
    (_nested, {"q", "out"}),
    (_keys_by_name, {"x", "w"}),  # a key that is not a literal: the strings the code names
    (_literal_and_by_name, {"x", "w1", "w2"}),
]
UNKNOWABLE = [
    (lambda i, c: _reads_x_and_eps(**i), r"passes the inputs on whole \(DICT_MERGE\)"),
    (_iterates, r"passes the inputs on whole \(GET_ITER\)"),
    (_items, "reads inputs.items"),
    (_aliases, r"passes the inputs on whole \(STORE_FAST\)"),
    (_to_another_package, "passes the inputs to dumps, which is not read"),  # another package's: not followed
    (_to_a_method, "passes the inputs to a call, which is not read"),
    (_deep, "more than 3 calls deep"),
    # by keyword the stack position says nothing of the parameter: d would be missed and cfg read as the inputs
    (lambda i, c: _reads_x_and_eps(config=c, inputs=i), "in a call with keyword arguments"),
]


def failures(read) -> list[str]:
    """What ``read`` gets wrong of the cases above, one line each."""
    out = []
    for n, (fn, known) in enumerate(KNOWN):
        names = read([(fn, 0)])
        if names.unknowable or names.known != known:
            out.append(f"KNOWN[{n}] {fn.__name__}: {sorted(names.known)} ({names.unknowable!r}), not {sorted(known)}")
    for n, (fn, why) in enumerate(UNKNOWABLE):
        names = read([(fn, 0)])
        if names.unknown(["x", "anything"]) or not re.search(why, names.unknowable):
            out.append(f"UNKNOWABLE[{n}] {fn.__name__}: {names.unknowable!r}, not /{why}/")
    return out


if __name__ == "__main__":
    import types

    # the reader alone: flytune_nb's own __init__ imports torch, which another Python here may not have
    package = types.ModuleType("flytune_nb")
    package.__path__ = [f"{sys.argv[1]}/flytune_nb"]
    sys.modules["flytune_nb"] = package
    from flytune_nb.core.input_names import read

    wrong = failures(read)
    print("\n".join(wrong) or f"all {len(KNOWN) + len(UNKNOWABLE)} cases hold")
    sys.exit(1 if wrong else 0)
