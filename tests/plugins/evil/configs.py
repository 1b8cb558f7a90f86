import os

from flytune_nb.core.config import Config


def configs(shape, dtype, device):
    modes = [int(m) for m in os.environ.get("FLYTUNE_EVIL_MODES", "0,1,2,3,4").split(",")]
    sleeps = [int(s) for s in os.environ.get("FLYTUNE_EVIL_SLEEPS", "0,1").split(",")]
    return [Config({"MODE": m, "SLEEP_MS": s}, num_warps=1) for m in modes for s in (sleeps if m == 0 else [0])]
