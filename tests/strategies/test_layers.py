"""The search layer stands below the engine: a strategy or the search loop is usable (and testable on replayed
timings) without the sweep machinery, so nothing under strategies/, nor what it builds on (core/, measure/), imports
flytune_nb.engine or flytune_nb.ui, at module level or inside a function."""
import ast
from pathlib import Path

import flytune_nb

PACKAGE = Path(flytune_nb.__file__).parent


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_search_layer_and_below_never_import_engine_or_ui():
    found = {}
    for layer in ("core", "measure", "strategies"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            bad = sorted(n for n in _imports(path) if n.split(".")[:2] in (["flytune_nb", "engine"], ["flytune_nb", "ui"]))
            if bad:
                found[str(path.relative_to(PACKAGE))] = bad
    assert found == {}


def test_events_keep_their_engine_import_path():
    from flytune_nb.core import events
    from flytune_nb.engine import events as engine_events

    for name in ("Emitter", "Event", "ShapeDone", "ShapeSelected", "SweepDone", "TrialDone", "TrialFailed",
                 "TrialStarted"):
        assert getattr(engine_events, name) is getattr(events, name)
