"""A FlyDSL kernel LLVM refuses (200000 bytes of LDS: over gfx942's 64 KiB and gfx950's 160 KiB), as a kernel spec
whose run goes through flytune_nb.backends.flydsl.launch. Imports FlyDSL only when called."""
import functools


@functools.lru_cache(maxsize=None)
def lds_hog_spec():
    import torch

    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from flytune_nb.core.config import Config
    from flytune_nb.core.spec import KernelSpec
    from flytune_nb.backends.flydsl import launch

    n = 50000  # fp32 slots

    @fx.struct
    class Hog:
        a: fx.Array[fx.Float32, n, 16]

    @flyc.kernel(name="flytune_lds_hog")
    def lds_hog(X: fx.Tensor, BLOCK: fx.Constexpr[int]):
        s = fx.SharedAllocator().allocate(Hog).peek().a.view(fx.make_layout(n, 1))
        fx.memref_store(fx.Float32(1.0), s, fx.thread_idx.x)

    @flyc.jit
    def lds_hog_launch(X: fx.Tensor, BLOCK: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
        lds_hog(X, BLOCK).launch(grid=(1, 1, 1), block=(BLOCK, 1, 1), stream=stream)

    def run(inputs, config):
        launch(lds_hog_launch, (inputs["x"],), config)
        return inputs["x"]

    return KernelSpec(
        name="lds_hog", axes=("N",), batch_axis="N", dtypes=("fp32",),
        make_inputs=lambda s, d, dev: {"x": torch.empty(s["N"], dtype=torch.float32, device=dev.torch_device)},
        run=run, reference=lambda i: i["x"], shape_of=lambda i: {"N": i["x"].numel()},
        configs=lambda s, d, dev: [Config({"BLOCK": 64}, num_warps=None, num_stages=None)],
        default=lambda s, d, dev: Config({"BLOCK": 64}, num_warps=None, num_stages=None), backend="flydsl")
