"""The event types under the engine's name, for listeners that import them from here. They live in
``flytune_nb.core.events``: the search loop emits them too, and the search layer does not import the engine."""
from flytune_nb.core.events import (  # noqa: F401
    Emitter, Event, Listener, ShapeDone, ShapeSelected, SweepDone, TrialDone, TrialFailed, TrialStarted,
)
