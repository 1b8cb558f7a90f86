"""Triton's interpreter computes a bf16 ``tl.dot`` as flytune_nb._compat.triton.fix_interpreter_bf16_dot makes it:
the product of the bf16 values, as an MMA with an fp32 accumulator (stock Triton 3.6 multiplies their uint16 bits)."""
import pytest
import torch
import triton
import triton.language as tl

from flytune_nb.core.device import ensure_backend, interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="Triton's interpreter (CPU path)")


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_bf16_dot_is_the_product_of_its_values(dtype):
    ensure_backend()  # what every flytune entry point runs first
    a, b = torch.randn(16, 16, dtype=dtype), torch.randn(16, 16, dtype=dtype)
    c = torch.empty(16, 16)
    _dot[(1,)](a, b, c, BLOCK=16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
