from flytune_nb.core.config import Config


def configs(shape, dtype, device):
    return [Config({"BLOCK": b, "MODE": m}, num_warps=1) for m in (0, 1, 2, 3) for b in (64, 128)]
