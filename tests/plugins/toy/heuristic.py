from flytune_nb.core.config import Config


def default(shape, dtype, device):
    return Config({"BLOCK": 128, "MODE": 0}, num_warps=1)
