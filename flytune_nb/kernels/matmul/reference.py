"""The torch reference (float64) and the eager baseline (torch.matmul: cuBLAS / hipBLASLt on a GPU)."""
import torch


def matmul_ref(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return a.double() @ w.double().T


def matmul_torch(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return a @ w.T
