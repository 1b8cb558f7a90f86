"""What a FlyDSL kernel folder imports (the FlyDSL half of the plugin API; docs/flydsl.md walks through it).

``require()`` first thing in the folder's ``__init__`` (KernelUnavailable with the install line when flydsl is
missing), ``launch(fn, args, config, **constexprs)`` in its launcher, ``FlyDSLArtifact`` in its spec so that
``flytune export`` writes the offline configs FlyDSL's own ``@autotune(artifact_name=...)`` serves. Importing this
imports nothing of FlyDSL.
"""
from flytune_nb.artifacts.flydsl import FlyDSLArtifact
from flytune_nb.backends.flydsl import FlyDSLCompileError, launch, require

__all__ = ["FlyDSLArtifact", "FlyDSLCompileError", "launch", "require"]
