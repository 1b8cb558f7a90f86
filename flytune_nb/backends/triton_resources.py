"""What a compiled Triton kernel uses, read from what Triton built, with no device and no driver: registers, spills,
scratch, shared memory / LDS, an occupancy estimate, and the instruction counts a kernel engineer reads.

Without a driver, CompiledKernel.n_regs / n_spills are never filled in (Triton asks the driver for them when it loads
the binary), and an over-limit shared-memory config compiles fine (the check is at load): the same numbers come from
the binary.

AMD (gfx942 / gfx950), all in ``asm["amdgcn"]``:
- the code object's metadata (``.vgpr_count``, ``.agpr_count``, ``.sgpr_count``, ``.vgpr_spill_count``,
  ``.sgpr_spill_count``, ``.private_segment_fixed_size`` = scratch bytes per lane, ``.wavefront_size``);
- the kernel descriptor (``.amdhsa_next_free_vgpr``: the VGPRs + AGPRs *allocated*, the occupancy input). Not the bare
  ``.vgpr_count``: with ``waves_per_eu=2`` LLVM pads the allocation to the 2-wave budget (169 for code needing 56),
  which is what the hardware then reserves;
- LLVM's comment ``; Occupancy: N`` (registers and waves_per_eu only: it cannot see Triton's LDS, which is dynamic,
  so ``.group_segment_fixed_size`` is 0 and the LDS figure is the metadata's ``shared``);
- instruction mnemonics of the body. Counting the text matched ``llvm-objdump -d --mcpu=gfx942`` of the hsaco for
  every mnemonic but ``s_nop`` (alignment padding the text does not show).
Triton 3.6 emits buffer loads/stores on gfx942/950 (AMDGCN_USE_BUFFER_OPS, on by default), not global ones.

NVIDIA (sm_90 / sm_100): registers, stack frame and local memory from ``cuobjdump -res-usage`` on ``asm["cubin"]``
(the tool ships in Triton's wheel; ~30 ms a kernel). ptxas puts spills in the stack frame (STACK), not in LOCAL: a
256x256x64 tile on 4 warps showed ``REG:255 STACK:3328 LOCAL:0`` beside ptxas' "7048 bytes spill stores". A few
bytes of stack with few registers are a call's register saves (8-24 B around the 64-bit ``%`` subroutine, measured
with 48-128 registers), not register pressure: flytune_nb.measure.census counts a spill above SMALL_STACK_BYTES.
Instruction counts come from ``asm["ptx"]`` (load widths, cp.async, TMA, MMA).
"""
from __future__ import annotations

import collections
import re
import subprocess
import tempfile

from flytune_nb._compat.triton import compiled_binary, compiled_metadata, compiled_text, nvidia_tool
from flytune_nb.core.targets import ArchRules, arch_rules


def kernel_resources(kernel, device) -> dict:
    """One compiled kernel's resources on ``device`` (a DeviceInfo; its arch picks the occupancy rules)."""
    md = compiled_metadata(kernel)
    rules = arch_rules(device)
    binary = compiled_binary(kernel) or b""
    r = {"name": md.get("name", ""), "num_warps": int(md.get("num_warps") or 0), "shared": int(md.get("shared") or 0),
         "binary_bytes": len(binary)}
    if device.backend == "hip":
        r.update(amd_resources(compiled_text(kernel, "amdgcn")))
        r.update({k: md.get(k) for k in ("waves_per_eu", "matrix_instr_nonkdim", "kpack")})
        r.update(amd_occupancy(r, rules))
    else:
        r.update(cubin_resources(binary))
        r["tmem_columns"] = md.get("tmem_size")
        r["insn"] = ptx_counts(compiled_text(kernel, "ptx"))
        r.update(nvidia_occupancy(r, rules))
    r["smem_over_limit"] = bool(device.smem_bytes) and r["shared"] > device.smem_bytes
    return r


# -- AMD -----------------------------------------------------------------------------------------------------------
_YAML = {"vgpr_count": "vgprs", "agpr_count": "agprs", "sgpr_count": "sgprs", "vgpr_spill_count": "vgpr_spills",
         "sgpr_spill_count": "sgpr_spills", "private_segment_fixed_size": "scratch_bytes",
         "wavefront_size": "wavefront_size"}
_DESCRIPTOR = {"amdhsa_next_free_vgpr": "vgpr_alloc", "amdhsa_next_free_sgpr": "sgpr_alloc",
               "amdhsa_accum_offset": "accum_offset"}
_COMMENTS = {"Occupancy": "occupancy_llvm", "codeLenInByte": "code_bytes"}
_MNEMONIC = re.compile(r"^\s+([a-z_][a-z0-9_.]*)\b", re.M)


def amd_resources(text: str) -> dict:
    """Registers, spills, scratch and instruction counts from the AMD assembly text; None for what is absent."""
    r: dict = {}
    for key, name in _YAML.items():
        # metadata YAML: the first key of a list item is written "- .agpr_count: 0"
        m = re.search(rf"^[\s-]+\.{key}:\s+(-?\d+)\s*$", text, re.M)
        r[name] = int(m.group(1)) if m else None
    for key, name in _DESCRIPTOR.items():
        m = re.search(rf"^\s+\.{key}\s+(\d+)", text, re.M)
        r[name] = int(m.group(1)) if m else None
    for key, name in _COMMENTS.items():
        m = re.search(rf"^; {key}\s*[:=]\s*(\d+)", text, re.M)
        r[name] = int(m.group(1)) if m else None
    r["insn"] = amd_instruction_counts(text)
    return r


def amd_instruction_counts(text: str) -> dict:
    """Static counts of the kernel body's instructions (the text before the kernel descriptor)."""
    body = text.split(".amdhsa_kernel", 1)[0]
    c = collections.Counter(m.group(1) for m in _MNEMONIC.finditer(body) if not m.group(1).startswith("."))

    def pick(*prefixes):
        return {k: v for k, v in sorted(c.items()) if k.startswith(prefixes)}

    loads = pick("global_load_", "buffer_load_", "flat_load_")
    widths: collections.Counter = collections.Counter()
    for name, n in loads.items():
        widths[_load_bytes(name)] += n
    mfma = pick("v_mfma_", "v_smfmac_")
    return {"mfma": mfma, "mma_total": sum(mfma.values()), "loads": loads,
            "load_bytes": {str(w): n for w, n in sorted(widths.items())},
            "wide_loads": widths.get(16, 0), "narrow_loads": sum(n for w, n in widths.items() if w < 16),
            "stores": pick("global_store_", "buffer_store_", "flat_store_"),
            "lds_reads": sum(pick("ds_read", "ds_load").values()),
            "lds_writes": sum(pick("ds_write", "ds_store").values()),
            "lds_other": sum(pick("ds_bpermute", "ds_permute", "ds_swizzle").values()),
            "s_waitcnt": sum(pick("s_waitcnt").values()), "scratch_ops": sum(pick("scratch_").values()),
            "accvgpr_moves": sum(pick("v_accvgpr_").values()), "total": sum(c.values())}


def _load_bytes(mnemonic: str) -> int:
    """Bytes a lane loads: ``buffer_load_dwordx4`` 16, ``_dwordx2`` 8, ``_dword`` 4, ``_ushort`` 2, ``_ubyte`` 1."""
    tail = mnemonic.rsplit("_", 1)[-1]
    return {"dwordx4": 16, "dwordx3": 12, "dwordx2": 8, "dword": 4, "ushort": 2, "short": 2, "sshort": 2,
            "ubyte": 1, "sbyte": 1, "b128": 16, "b96": 12, "b64": 8, "b32": 4, "u16": 2, "i16": 2, "u8": 1,
            "i8": 1}.get(tail, 0)


def amd_occupancy(r: dict, rules: ArchRules) -> dict:
    """Waves per SIMD a CU holds of this kernel, from the descriptor's VGPR allocation, its LDS and the workgroup
    limits (LLVM's ``; Occupancy`` sees only the first). A workgroup's waves are spread over the 4 SIMDs: fewer
    waves than SIMDs pack several workgroups onto them, more put ceil(waves / 4) of each on every SIMD. The figure
    is the busiest SIMD's. LDS over the CU's budget: 0 (the kernel would not load)."""
    alloc = -(-(r.get("vgpr_alloc") or r.get("vgprs") or 1) // rules.vgpr_granule) * rules.vgpr_granule
    waves_vgpr = min(rules.max_waves_per_simd, rules.vgprs_per_lane // alloc)
    waves = max(1, r["num_warps"])
    simds = rules.simds_per_unit
    wg_vgpr = waves_vgpr * simds // waves if waves < simds else waves_vgpr // -(-waves // simds)
    wg_lds = rules.smem_per_unit // r["shared"] if r["shared"] else 1 << 30
    wg_hw = 40 if waves == 1 else min(40 // waves, 16)
    limits = (("vgprs", wg_vgpr), ("lds", wg_lds), ("workgroups", wg_hw))
    wg = min(v for _, v in limits)
    occupancy = min(rules.max_waves_per_simd, -(-wg * waves // simds)) if wg > 0 else 0
    return {"workgroups_per_unit": wg, "occupancy": occupancy,
            "occupancy_limiter": min(limits, key=lambda t: t[1])[0] if occupancy < rules.max_waves_per_simd
            else "max"}


# -- NVIDIA --------------------------------------------------------------------------------------------------------
def cubin_resources(cubin: bytes) -> dict:
    """REG / STACK / LOCAL of the kernel from ``cuobjdump -res-usage``. (Its SHARED is 1024 for every Triton kernel,
    the reserved part; Triton's own shared memory is dynamic and is the metadata's ``shared``.)"""
    tool = nvidia_tool("cuobjdump")
    out = {"regs": None, "stack_bytes": None, "local_bytes": None, "scratch_bytes": None}
    if not cubin or tool is None:
        return out
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", res)
    if m:
        regs, stack, local = (int(g) for g in m.groups())
        out.update(regs=regs, stack_bytes=stack, local_bytes=local, scratch_bytes=stack + local)
    return out


_PTX_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_:]+)*)", re.M)
_PTX_BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "b32": 32, "u32": 32,
             "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64, "b128": 128}
_CP_ASYNC = re.compile(r"cp\.async\.c[ag]\.shared\.global(?:\.[A-Za-z0-9_:]+)*\s*\[[^\]]*\],\s*\[[^\]]*\],\s*"
                       r"(0x[0-9a-fA-F]+|\d+)")


def ptx_counts(ptx: str) -> dict:
    """Static counts from the PTX: global load widths (``ld.global.v4.b32`` 16 B, ``cp.async`` by its size
    operand), TMA loads, MMA instructions (``wgmma.mma_async`` on sm_90, ``tcgen05.mma`` on sm_100)."""
    c = collections.Counter(m.group(1) for m in _PTX_OP.finditer(ptx))
    widths: collections.Counter = collections.Counter()
    for op, n in c.items():
        if op.startswith("ld.global"):
            parts = op.split(".")
            vec = next((int(x[1:]) for x in parts if x in ("v2", "v4", "v8")), 1)
            bits = next((_PTX_BITS[x] for x in reversed(parts) if x in _PTX_BITS), 32)
            widths[vec * bits // 8] += n
    for m in _CP_ASYNC.finditer(ptx):
        widths[int(m.group(1), 0)] += 1

    def pick(*prefixes):
        return {k: v for k, v in sorted(c.items()) if k.startswith(prefixes)}

    mma = pick("wgmma.mma_async", "tcgen05.mma", "mma.sync")
    return {"mma": mma, "mma_total": sum(mma.values()),
            "load_bytes": {str(w): n for w, n in sorted(widths.items())},
            "wide_loads": widths.get(16, 0), "narrow_loads": sum(n for w, n in widths.items() if w < 16),
            "cp_async": sum(pick("cp.async.ca", "cp.async.cg").values()),
            "tma_loads": sum(n for k, n in c.items() if k.startswith("cp.async.bulk.tensor") and "global" in k
                             and k.index("shared") < k.index("global")),
            "shared_loads": sum(pick("ld.shared", "ldmatrix").values()), "total": sum(c.values())}


def nvidia_occupancy(r: dict, rules: ArchRules) -> dict:
    """Warps per SM: blocks per SM bounded by registers (per warp, rounded to the allocation unit), shared memory
    (with the 1 KiB reserved per block, in 128-byte granules), warps and blocks per SM."""
    warps = max(1, r["num_warps"])
    per_warp = -(-max(r.get("regs") or 1, 1) * 32 // rules.reg_granule) * rules.reg_granule
    smem = -(-(r["shared"] + rules.smem_reserved_per_block) // 128) * 128
    limits = (("registers", rules.regs_per_unit // per_warp // warps), ("smem", rules.smem_per_unit // smem),
              ("warps", rules.max_warps_per_unit // warps), ("blocks", rules.max_blocks_per_unit))
    blocks = min(v for _, v in limits)
    occupancy = blocks * warps
    return {"blocks_per_unit": blocks, "occupancy": occupancy,
            "occupancy_limiter": min(limits, key=lambda t: t[1])[0] if occupancy < rules.max_warps_per_unit
            else "max"}
