"""The torch reference (float64) and the eager baseline a user would write."""
import torch


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def softmax_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)
