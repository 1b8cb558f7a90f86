"""Named GPUs a census compiles for without having one: what a device reports (the DeviceInfo our spaces read) and the
per-arch hardware rules an occupancy estimate needs.

Nothing here runs on a GPU; a target is a description. Every number names where it comes from, and the numbers no
vendor page seen here confirms are listed in ``Target.unverified`` (``flytune census --list-targets`` shows them):

- AMD rows: ROCm's GPU-specifications tables (rocm.docs.amd.com, "reference/gpu-arch-specs" and "gpu-specs"):
  MI300X / MI325X are gfx942 (CDNA3), 304 CUs (38 per XCD), 64 KiB LDS per CU, 512 KiB of VGPRs per CU, 4 MiB of L2
  per XCD (32 MiB in all) and a 256 MiB Infinity Cache, 192 / 256 GiB HBM; MI350X / MI355X are gfx950 (CDNA4),
  256 CUs (32 per XCD), 160 KiB LDS, 288 GiB. A gfx950 host's HIP API reports 256 CUs, 163840 B of LDS per block
  and 64-wide waves (a public gfx950 tuning report). ``l2_bytes`` is the per-XCD L2, which is what HIP reports as the
  device's L2 size (an MI300X reports 4194304): assumed for MI325X / MI355X.
- AMD device names are ``torch.cuda.get_device_name()`` as SGLang's MI300X / MI325X config files are named
  (``device_name=AMD_Instinct_MI300X``). An MI355X reports "AMD Instinct MI355X" under SGLang's image and "AMD
  Instinct MI355 OAM" through vLLM's platform layer (the same report): SGLang's spelling is used.
- AMD register and occupancy rules (gfx90a-class, gfx942 and gfx950): LLVM's AMDGPUBaseInfo.cpp (IsaInfo): 512
  VGPRs (arch VGPRs + AGPRs, unified) per SIMD lane, allocated in granules of 8, at most 8 waves per SIMD, 4 SIMDs
  per CU, at most 40 one-wave or min(40 / waves, 16) larger workgroups per CU.
- NVIDIA rows: the CUDA C++ Programming Guide's compute-capability table and the Hopper / Blackwell tuning guides:
  65536 32-bit registers per SM allocated per warp in units of 256, at most 64 warps and 32 blocks per SM, 228 KiB of
  shared memory per SM of which one block may opt in to 227 KiB, 1 KiB reserved per block. H200: what
  flytune's ``current_device()`` reported on the project's H200 (132 SMs, 60 MiB L2, 140 GiB, 227 KiB opt-in).
  H100 SXM5: 132 SMs, 50 MB L2, 80 GB. B200: 180 GB per GPU (DGX B200: 1,440 GB for 8); its 148 SMs and 126 MB L2
  are the commonly quoted figures, not confirmed from a vendor page here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from flytune_nb.core.device import DESCRIBED, DeviceInfo, normalise_name
from flytune_nb.core.suggest import closest
from flytune_nb.errors import UsageError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class ArchRules:
    """What bounds how many warps (waves) of a kernel one SM (CU) holds, per architecture."""

    backend: str  # "hip" | "cuda"
    warp_size: int
    smem_per_unit: int  # LDS per CU / shared memory per SM, bytes
    # AMD: per SIMD lane, VGPRs + AGPRs (unified on gfx90a and newer), allocated in granules
    vgprs_per_lane: int = 0
    vgpr_granule: int = 0
    max_waves_per_simd: int = 0
    simds_per_unit: int = 0
    # NVIDIA: per SM
    regs_per_unit: int = 0
    reg_granule: int = 0  # registers per warp are allocated in units of this many
    max_warps_per_unit: int = 0
    max_blocks_per_unit: int = 0
    smem_reserved_per_block: int = 0
    # work-items (threads) one workgroup (block) may have: 1024 on CDNA and on Hopper/Blackwell. Triton compiles
    # num_warps=32 for wave64 (2048) without a word; the launch is what fails.
    max_block_threads: int = 1024

    @property
    def occupancy_unit(self) -> str:
        return "waves/SIMD" if self.backend == "hip" else "warps/SM"


_CDNA3 = ArchRules("hip", 64, 64 * KiB, vgprs_per_lane=512, vgpr_granule=8, max_waves_per_simd=8, simds_per_unit=4)
_HOPPER = ArchRules("cuda", 32, 228 * KiB, regs_per_unit=65536, reg_granule=256, max_warps_per_unit=64,
                    max_blocks_per_unit=32, smem_reserved_per_block=1 * KiB)
ARCHS = {
    "gfx942": _CDNA3,
    "gfx950": replace(_CDNA3, smem_per_unit=160 * KiB),
    "sm_90": _HOPPER,
    "sm_100": _HOPPER,
}


def arch_rules(device: DeviceInfo) -> ArchRules:
    """The rules of ``device``'s arch; for an arch not in the table, the closest known family's with the device's own
    shared memory (an estimate: the census says which arch it assumed)."""
    if device.arch in ARCHS:
        return ARCHS[device.arch]
    base = _CDNA3 if device.backend == "hip" else _HOPPER
    return replace(base, smem_per_unit=device.smem_bytes or base.smem_per_unit)


@dataclass(frozen=True)
class Target:
    """A named GPU: the DeviceInfo a real one reports (name as in artifact file names, arch, SM/CU count, L2, memory,
    per-block shared memory) and its architecture's rules."""

    alias: str  # what --target takes: mi300x, h200, ...
    device_name: str  # SGLang-normalised torch.cuda.get_device_name(): AMD_Instinct_MI300X
    backend: str
    arch: str
    units: int  # CUs (AMD) / SMs (NVIDIA)
    smem_per_block: int  # bytes one block may use (opt-in maximum on NVIDIA; LDS on AMD)
    l2_bytes: int
    total_memory: int
    register_file_bytes: int  # per CU / SM
    unverified: tuple = ()  # fields no vendor page seen here confirms
    note: str = ""

    @property
    def rules(self) -> ArchRules:
        return ARCHS[self.arch]

    @property
    def warp_size(self) -> int:
        return self.rules.warp_size

    def device(self) -> DeviceInfo:
        """What ``current_device()`` answers while compiling for this target: inputs live on the meta device."""
        return DeviceInfo(self.backend, self.device_name, self.arch, self.units, self.l2_bytes, self.total_memory,
                          "meta", self.smem_per_block)


def _described(alias: str, name: str, note: str) -> Target:
    """A target whose numbers are what current_device() reported on a real one (core.device.DESCRIBED)."""
    d = DESCRIBED[name]
    return Target(alias, d.name, d.backend, d.arch, d.sm_count, d.smem_bytes, d.l2_bytes, d.total_memory, 256 * KiB,
                  note=note)


TARGETS: dict[str, Target] = {t.alias: t for t in (
    Target("mi300x", "AMD_Instinct_MI300X", "hip", "gfx942", 304, 64 * KiB, 4 * MiB, 192 * GiB, 512 * KiB),
    Target("mi325x", "AMD_Instinct_MI325X", "hip", "gfx942", 304, 64 * KiB, 4 * MiB, 256 * GiB, 512 * KiB,
           unverified=("l2_bytes",)),
    Target("mi350x", "AMD_Instinct_MI350X", "hip", "gfx950", 256, 160 * KiB, 4 * MiB, 288 * GiB, 512 * KiB,
           unverified=("l2_bytes", "device_name")),
    Target("mi355x", "AMD_Instinct_MI355X", "hip", "gfx950", 256, 160 * KiB, 4 * MiB, 288 * GiB, 512 * KiB,
           unverified=("l2_bytes",), note="vLLM names it AMD_Instinct_MI355_OAM"),
    _described("h100", "NVIDIA_H100_80GB_HBM3", note="H100 SXM5, as current_device() reported it"),
    _described("h200", "NVIDIA_H200", note="as current_device() reported it on the project's H200"),
    Target("b200", "NVIDIA_B200", "cuda", "sm_100", 148, 227 * KiB, 126 * MiB, 180 * GiB, 256 * KiB,
           unverified=("units", "l2_bytes", "smem_per_block")),
)}


def get_target(name: str) -> Target:
    """The target called ``name`` (case-insensitive, ``MI300X``, ``AMD_Instinct_MI300X`` or torch's
    ``AMD Instinct MI300X`` too); a UsageError naming the known ones otherwise."""
    key = name.strip().lower()
    device_name = normalise_name(name.strip()).lower()  # the file names' form of torch's name, as SGLang makes it
    for t in TARGETS.values():
        if key == t.alias or device_name == t.device_name.lower():
            return t
    # an architecture is what the README's census names (gfx942, sm_90), but one arch is several GPUs with their
    # own CU counts and memory, which the census's occupancy and the exports' device names need: name them
    by_arch = [t.alias for t in TARGETS.values() if t.arch.lower() == key]
    if by_arch:
        raise UsageError(f"{name!r} is an architecture; a target is one GPU of it: {', '.join(by_arch)}")
    close = closest(key, TARGETS)
    hint = f" Did you mean {close!r}?" if close else ""
    raise UsageError(f"unknown target {name!r}.{hint} Known: {', '.join(TARGETS)}")
