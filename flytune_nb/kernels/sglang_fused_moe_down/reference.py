"""The reference: the down GEMM in float64 (kernels/sglang_fused_moe/reference.py, down_reference), a loop over
experts of act @ w2[e].T scaled by the routing weight and summed over the top-k slots."""
from .kernel import base


def reference(inputs):
    return base().reference.down_reference(inputs["act"], inputs["w2"], inputs["topk_weights"], inputs["topk_ids"],
                                           inputs.get("w2_scale"), base().kernel.fp8_quant)
