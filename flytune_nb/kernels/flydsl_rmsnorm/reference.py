"""The torch reference, in float64 from the inputs as they were before the launch."""
import torch


def rmsnorm_ref(x, weight, eps):
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.double()


def rmsnorm_torch(x, weight, eps):
    """Eager torch as a user would write it (the baseline, in the input dtype)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * weight
