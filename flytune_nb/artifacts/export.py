"""Export a results store's winners as SGLang-format files (merged into what is there) with provenance beside them.

Writes are atomic (temp file + rename) under a lock on each folder written (files.export_lock: nothing is left
beside SGLang's files), and the output is sorted and formatted the same way every time, so exporting the same data
twice gives byte-identical files.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from flytune_nb import backends
from flytune_nb.artifacts import flydsl
from flytune_nb.artifacts.files import (
    BUILTIN_DIR, PROVENANCE, ArtifactError, atomic_write_all, check_writable, export_lock, file_name, kernel_dir,
    read_provenance, read_table, refuse_inside_layout, refuse_installed_copy, render_for)
from flytune_nb.artifacts.unfinished import unfinished_keys
from flytune_nb.core.device import INTERPRETER_NAME
from flytune_nb.core.shapes import SGLANG_BATCH_SIZES

# An engine's lookup serves the nearest batch size's entry however far it is: one more than this many times away
# was tuned for another regime (a file of M = 16384 and 32768 rows alone would serve fused_add_rmsnorm's M = 1 a
# looped 4096-wide block, not the single pass its default takes). 8, not less: a grid of M = 1, 16, 64 serves 8
# from M = 1 and is not worth a warning; M = 2048 from 64 (32x) is.
FAR_FROM_ENTRY = 8


def plan_export(store, out_dir: str | Path, *, kernel: str | None = None, paths=(),
                cut_off: set[str] | None = None, dtype: str | None = None) -> list[dict]:
    """What an export would write: per file {"path", "by_m": {M: config dict}, "prov": {M: provenance},
    "stale": [M whose kernel source is not the kernel's current one], "left_out": [M the store has only on an
    older kernel source, toolchain or timing mode than the file's newest rows], "unfinished": [M a stopped sweep left
    without a selection, not exported]}; a file whose every M is unfinished has an empty ``by_m``.

    Each entry is the shape's winner: the selection stage's (strategies/selection.py), whose latencies are the
    medians of its interleaved re-timing, or for a store without one the search's fastest median. ``cut_off``: the
    store's unfinished_keys, when the caller has them already. ``dtype``: only that dtype's rows."""
    from flytune_nb.core.key import current_source
    from flytune_nb.core.registry import get_kernel, kernel_paths

    df = store.on_search_clock(_of_dtype(store.frame(kernel), dtype))
    if df.empty:
        return []
    sels = store.frame(kernel, table="selections")
    sel_by_key = {r["key"]: r for _, r in sels.iterrows()} if len(sels) else {}
    cut_off = unfinished_keys(store, kernel) if cut_off is None else cut_off
    out_dir = Path(out_dir)
    candidates, specs = [], {}
    for (kname, shape_json, dtype, device, key), g in df.groupby(["kernel", "shape", "dtype", "device", "key"]):
        ok = g[(g["status"] == "ok") & (g["fidelity"] == "full")]
        if ok.empty:
            continue
        spec = specs.get(kname) or specs.setdefault(kname, get_kernel(kname, kernel_paths(paths)))
        shape = json.loads(shape_json)
        best = ok.loc[ok["p50"].idxmin()]
        dflt = g[(g["is_default"] == 1) & (g["fidelity"] == "full")]
        d_p50 = float(dflt["p50"].iloc[0]) if len(dflt) and dflt["status"].iloc[0] == "ok" else math.nan
        sel = sel_by_key.get(key)
        unfinished = key in cut_off  # left out until the same sweep, run again, finishes it (artifacts/unfinished.py)
        won = best
        selection = None
        if sel is not None:
            # The selection's winner, even where its search trial did not pass (a default that failed once in the
            # search, then passed every round of the re-timing): the rounds vouch for it, and the search's fastest
            # is the candidate the selection just turned down. A winner that failed its rounds too is vouched for
            # by nothing: no entry.
            rows = ok[ok["config"] == sel["winner"]]
            if not len(rows) and sel["winner"] not in json.loads(sel["failed"] or "{}"):
                rows = g[(g["config"] == sel["winner"]) & (g["fidelity"] == "full")]
            if not len(rows):
                continue
            won = rows.iloc[0]
            selection = json.loads(sel["summary"])
        toolchain = json.loads(won["toolchain"] or "{}")
        rest = {a: v for a, v in shape.items() if a != spec.batch_axis}
        path = (kernel_dir(spec, out_dir) / backends.of(spec).config_dir_name(toolchain)
                / file_name(spec, rest, device, dtype))
        timing = won.get("timing")
        timing = timing if isinstance(timing, str) and timing else "events"  # a store from before timing modes
        won_p50 = float(won["p50"])
        if selection is not None:  # the re-timed medians: unbiased, unlike the fastest of the search's
            won_p50 = selection.get("winner_p50_ms") or won_p50
            d_p50 = selection.get("default_p50_ms") or d_p50
        current = current_source(spec)
        candidates.append({
            "path": path, "m": int(shape[spec.batch_axis]), "last_id": int(g["id"].max()),
            "version": (won["source"] or "", won["toolchain"] or "", timing), "config": json.loads(won["config"]),
            "stale": (won["source"] or "") != current, "spec": spec, "unfinished": unfinished,
            "prov": _clean({
                "kernel": kname, "device": device, "arch": won["arch"], "toolchain": toolchain,
                "source": won["source"] or "",
                "run_id": won["run_id"], "date": won["created"], "best_p50_ms": won_p50,
                "default_p50_ms": d_p50, "speedup": d_p50 / won_p50 if d_p50 == d_p50 else None,
                "search_best_p50_ms": float(best["p50"]), "timing": timing, "selection": selection,
                "rel_error": float(won["rel_error"]), "key": key, "shape": rest, "dtype": dtype,
                "default_config": json.loads(dflt["config"].iloc[0]) if len(dflt) else None})})
    groups: dict[Path, dict] = {}
    for path in {c["path"] for c in candidates}:
        unfinished = sorted(c["m"] for c in candidates if c["path"] == path and c["unfinished"])
        mine = [c for c in candidates if c["path"] == path and not c["unfinished"]]
        if not mine:
            groups[path] = {"path": path, "by_m": {}, "prov": {}, "stale": [], "left_out": [],
                            "unfinished": unfinished, "spec": None}
            continue
        # One file = one kernel-source version, toolchain and timing mode: the most recently measured. Rows of an
        # older version (the kernel was edited since) are never mixed in, whatever their timestamps.
        newest = max(mine, key=lambda c: c["last_id"])["version"]
        entry = groups[path] = {"path": path, "by_m": {}, "prov": {}, "stale": [], "spec": mine[0]["spec"],
                                "unfinished": unfinished,
                                "left_out": sorted({c["m"] for c in mine} - {c["m"] for c in mine
                                                                              if c["version"] == newest})}
        for c in sorted((c for c in mine if c["version"] == newest), key=lambda c: c["last_id"]):
            # A file name may leave axes or the dtype out (SGLang's MoE names show E and N only): two shapes that
            # differ only there would land in one file and the later would silently win.
            # At another batch size too: the server would serve one's configs to the other, measured for neither.
            m_seen = c["m"] if c["m"] in entry["prov"] else next(iter(entry["prov"]), None)
            seen = entry["prov"].get(m_seen)
            if seen and (seen["shape"], seen["dtype"]) != (c["prov"]["shape"], c["prov"]["dtype"]):
                # --kernel cannot part them (both are this file's kernel); --dtype can where only the dtype differs
                how = (f"export one dtype (flytune export --dtype {seen['dtype']}, or --dtype {c['prov']['dtype']})"
                       if seen["shape"] == c["prov"]["shape"] else
                       "sweep each model into a store of its own and export each to its own config dir (--out)")
                what = (f"batch size {c['m']} was measured for {seen['shape']} {seen['dtype']} and for "
                        if m_seen == c["m"] else
                        f"batch size {m_seen} was measured for {seen['shape']} {seen['dtype']} and batch size "
                        f"{c['m']} for ")
                raise ArtifactError(f"{path.name}: {what}{c['prov']['shape']} {c['prov']['dtype']}; the file name "
                                    f"cannot tell them apart: {how}.")
            entry["by_m"][c["m"]], entry["prov"][c["m"]] = c["config"], c["prov"]
            if c["stale"] and c["m"] not in entry["stale"]:
                entry["stale"].append(c["m"])
    return [groups[p] for p in sorted(groups)]


def _of_dtype(df, dtype: str | None):
    """The rows of one dtype (every row for None); UsageError for a name flytune does not know."""
    if dtype is None or df.empty:
        return df
    from flytune_nb.core import dtypes

    return df[df["dtype"] == dtypes.canonical(dtype)]


def _without_unfinished(plan: list[dict]) -> list[dict]:
    """The plan's files that have entries to write, after one warning per file that leaves shapes out unfinished."""
    for e in plan:
        if e["unfinished"]:
            _warn(f"{e['path'].name}: batch sizes {','.join(map(str, e['unfinished']))} are left out: the sweep that "
                  f"measured them stopped before it finished them (no selection against the default), so their "
                  f"fastest is of part of the search; run the same sweep again to resume and finish them",
                  stacklevel=4)
    return [e for e in plan if e["by_m"]]


def _version(p: dict) -> tuple:
    return p.get("source"), json.dumps(p.get("toolchain"), sort_keys=True), p.get("timing") or "events"


def _merge(entry: dict, table: dict, old_prov: dict, replace_stale: bool = False) -> tuple[dict, dict]:
    """The file's new table and provenance: entries for other batch sizes are kept. Entries of another kernel
    source, toolchain or timing mode are never mixed in: where this export covers all of them they are replaced;
    where it would leave some beside the new ones, ArtifactError (``replace_stale`` drops them instead)."""
    version = {_version(p) for p in entry["prov"].values()}
    covered = {str(m) for m in entry["prov"]}
    _refuse_another_model(entry, old_prov)
    other = sorted((k for k, p in old_prov.items() if _version(p) not in version), key=int)
    left = [k for k in other if k not in covered]
    if left and not replace_stale:
        old = old_prov[left[0]]
        raise ArtifactError(
            f"{entry['path'].name}: batch sizes {', '.join(left)} there were tuned for another kernel source, "
            f"toolchain or timing mode (source {old.get('source')}, timing {old.get('timing') or 'events'}) than "
            f"this export (source {next(iter(version))[0]}, timing {next(iter(version))[2]}), which covers only "
            f"{', '.join(sorted(covered, key=int))}; "
            f"a file never mixes the two. Sweep every batch size of the file again (--grid \"M={','.join(sorted(set(left) | covered, key=int))} ...\"), "
            f"or pass --replace-stale to drop the old entries.")
    if left and replace_stale:
        _warn(f"{entry['path'].name}: --replace-stale drops batch sizes {','.join(left)}, tuned for another kernel "
              f"source, toolchain or timing mode; lookups there now take the nearest of "
              f"{','.join(sorted(covered, key=int))}", stacklevel=4)
    if other:
        table = {m: v for m, v in table.items() if str(m) not in other}
        old_prov = {k: v for k, v in old_prov.items() if k not in other}
    unknown = sorted((str(m) for m in table if str(m) not in old_prov and str(m) not in covered), key=int)
    if unknown:  # kept (they may be a colleague's hand-tuned entries), but nothing vouches for them
        _warn(f"{entry['path'].name}: keeps batch sizes {','.join(unknown)}, which {PROVENANCE} does not record "
              f"(added by hand or by another tool); flytune check cannot say what they were tuned for", stacklevel=4)
    per_m = {**old_prov, **{str(m): v for m, v in entry["prov"].items()}}
    return {**table, **entry["by_m"]}, {k: per_m[k] for k in sorted(per_m, key=int)}


def _model(record: dict, batch_axis: str):
    """What a provenance record was tuned for apart from the batch size: (shape without it, dtype); None for a record
    that does not say."""
    if not isinstance(record, dict) or not isinstance(record.get("shape"), dict):
        return None
    rest = tuple(sorted((k, int(v)) for k, v in record["shape"].items() if k != batch_axis))
    return rest, record.get("dtype")


def _refuse_another_model(entry: dict, old_prov: dict) -> None:
    """A file name may leave axes out (SGLang's MoE names show E and N, not K or top-k): a file already holding
    another model's batch sizes is never merged with this export's, nor overwritten by it (its entries would be
    served for the wrong model, or lost), whichever batch sizes the export covers."""
    axis = entry["spec"].batch_axis
    ours = {_model(p, axis) for p in entry["prov"].values()} - {None}
    for m, record in sorted(old_prov.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        theirs = _model(record, axis)
        if theirs is not None and ours and theirs not in ours:
            now = next(iter(ours))
            raise ArtifactError(
                f"{entry['path'].name}: holds batch size {m} tuned for {dict(theirs[0])} {theirs[1]}; this export is "
                f"for {dict(now[0])} {now[1]}, and the file name cannot tell them apart. Export to another config "
                f"dir (--out), or delete the file to replace it.")


def _warn(message: str, stacklevel: int = 3) -> None:
    """An ArtifactWarning pointing at ``export``'s caller (stacklevel counts this frame). Imported here: serve.lookup
    imports this package."""
    import warnings

    from flytune_nb.serve.lookup import ArtifactWarning

    warnings.warn(message, ArtifactWarning, stacklevel=stacklevel)


def preview(store, out_dir: str | Path, *, kernel: str | None = None, paths=(),
            replace_stale: bool = False, dtype: str | None = None) -> list[tuple[Path, str, str]]:
    """(path, text an export would write, text there now or "") per file, writing nothing — the same merge as
    ``export``, FlyDSL offline configs included (a file the export would refuse to mix previews as the error's
    message), and the same warnings about entries left out or batch sizes whose nearest entry is far away."""
    refuse_inside_layout(out_dir)  # as export does: its files would land where no lookup reads them
    out, cut_off = [], unfinished_keys(store, kernel)  # read once for both plans
    for entry in flydsl.plan(store, out_dir, kernel=kernel, paths=paths, cut_off=cut_off, dtype=dtype):
        path = entry["path"]
        try:  # export refuses to merge into a sidecar it cannot read (flydsl.check_sidecars)
            flydsl.read_sidecar(path.parent / flydsl.PROVENANCE)
            text = entry["text"]
        except ArtifactError as e:
            text = f"(not written: {e})\n"
        out.append((path, text, path.read_text() if path.exists() else ""))
    for entry in _without_unfinished(plan_export(store, out_dir, kernel=kernel, paths=paths, cut_off=cut_off,
                                                 dtype=dtype)):
        path = entry["path"]
        old = path.read_text() if path.exists() else ""
        try:
            # a malformed file or provenance.json beside it (even where the file is new) is what export refuses on:
            # previewed as that refusal, never as a merge into nothing that would drop what is there
            table = read_table(path) if old else {}
            prov = _old_provenance(path)
            merged = _merge(entry, table, prov, replace_stale)[0]
            text = render_for(entry["spec"], merged)
            _warn_far(entry["spec"], path.name, merged)
            _warn_shipped(entry, merged)
            _warn_wide_bands(entry)
        except ArtifactError as e:
            text = f"(not written: {e})\n"
        out.append((path, text, old))
    return out


def refuse_interpreter_timings(out_dir: str | Path, devices) -> None:
    """ArtifactError when timings of the CPU interpreter (one of ``devices``) would go into the repository's
    committed exports/: they say nothing about GPU speed."""
    if INTERPRETER_NAME in devices and Path(out_dir).resolve() == BUILTIN_DIR:
        raise ArtifactError(f"not written: these are {INTERPRETER_NAME} timings, and {out_dir} is the repository's "
                            f"committed GPU configs; choose a scratch folder (flytune export --out DIR)")


def export(store, out_dir: str | Path, *, kernel: str | None = None, paths=(), replace_stale: bool = False,
           dtype: str | None = None) -> list[Path]:
    """Write the winners of every (kernel, non-batch shape, device, dtype) found in ``store``. Returns the files.
    Entries already in a file for other batch sizes are kept (merged); the same batch size is replaced; entries of
    another kernel source, toolchain or timing mode are never mixed in (``_merge``). Interpreter timings are refused
    for the repository's committed exports/ (BUILTIN_DIR): they say nothing about GPU speed, and `flytune export`
    writes there by default. Entries measured on a kernel source that is no longer the kernel's are written, with a
    warning: `flytune check` will call them stale. A FlyDSL kernel's winners also become FlyDSL offline configs, one
    per exact key, under ``<out_dir>/flydsl_autotune/`` (flytune_nb.artifacts.flydsl); those are refused unless they
    were timed on an AMD GPU. ``dtype``: only that dtype's winners (bf16 and fp16 share SGLang's MoE file name, so a
    store holding both exports one at a time). Everything is checked before anything is written."""
    refuse_installed_copy(out_dir)
    refuse_inside_layout(out_dir)
    cut_off = unfinished_keys(store, kernel)  # read once for both plans
    plan = _without_unfinished(plan_export(store, out_dir, kernel=kernel, paths=paths, cut_off=cut_off, dtype=dtype))
    refuse_interpreter_timings(out_dir, {p.get("device") for entry in plan for p in entry["prov"].values()})
    fly = flydsl.plan(store, out_dir, kernel=kernel, paths=paths, cut_off=cut_off, dtype=dtype)
    stale = [f"{e['path'].name} (M={','.join(map(str, e['stale']))})" for e in plan if e["stale"]]
    if stale:
        _warn(f"exported entries measured on an older source of the kernel than its current one: "
              f"{'; '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}; flytune check will report them stale: "
              f"sweep them again")
    for e in plan:
        if e["left_out"]:
            every = sorted(set(e["left_out"]) | set(e["by_m"]))
            _warn(f"{e['path'].name}: batch sizes {','.join(map(str, e['left_out']))} were measured in this store "
                  f"only on an older kernel source, toolchain or timing mode than its newest rows "
                  f"(M={','.join(map(str, sorted(e['by_m'])))}), and are left out of it; sweep them again "
                  f"(--grid \"M={','.join(map(str, every))} ...\") to export them")
    # Check every file's merge before writing any: a refusal (or a warning turned into an error) must not leave half
    # an export behind.
    for entry in plan:
        path = entry["path"]
        merged = entry["by_m"]
        old = _old_provenance(path)  # a malformed sidecar is refused here, also beside a file not written yet
        if path.exists():
            merged = _merge(entry, read_table(path), old, replace_stale)[0]
        _warn_far(entry["spec"], path.name, merged)
        _warn_shipped(entry, merged)
        _warn_wide_bands(entry)
    flydsl.check_sidecars(fly)
    for folder in sorted({e["path"].parent for e in plan + fly}):
        check_writable(folder)
    written = []
    for entry in plan:
        path = entry["path"]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArtifactError(f"cannot create {path.parent}: {e.strerror or e}") from None
        with export_lock(path.parent):
            # Read and check both files before writing either: a bad sidecar must not leave a new artifact behind
            # with no provenance.
            prov_path = path.parent / PROVENANCE
            prov = read_provenance(prov_path)
            table = read_table(path) if path.exists() else {}
            # a file deleted by hand leaves its provenance record behind: the file starts afresh, and so does that
            old = prov.get(path.name, {}) if path.exists() else {}
            table, prov[path.name] = _merge(entry, table, old, replace_stale)
            sidecar = json.dumps(dict(sorted(prov.items())), indent=1, sort_keys=True) + "\n"
            try:
                atomic_write_all([(path, render_for(entry["spec"], table)), (prov_path, sidecar)])
            except OSError as e:
                raise ArtifactError(f"cannot write {path.name} in {path.parent}: {e.strerror or e}; it and its "
                                    f"{PROVENANCE} are as they were"
                                    + (f" (written before it: {', '.join(p.name for p in written)})" if written
                                       else "")) from None
        written.append(path)
    return written + flydsl.write_planned(fly)


def _old_provenance(path: Path) -> dict:
    """The provenance of the file at ``path`` as its sidecar records it; nothing for a file that is not there. The
    sidecar is read either way: one it cannot read is ArtifactError even for a new file, since export rewrites the
    sidecar whole, and would otherwise drop the records of every other file beside it."""
    prov = read_provenance(path.parent / PROVENANCE)
    return prov.get(path.name, {}) if path.exists() else {}


def _warn_wide_bands(entry: dict) -> None:
    """One warning per file naming the batch sizes this export writes whose selection decided with a tie band past
    selection.WIDE_BAND (a busy machine's noisy rounds): such a band calls a config several times faster a tie."""
    from flytune_nb.strategies.selection import WIDE_BAND, too_wide

    wide = {m: p["selection"] for m, p in sorted(entry["prov"].items())
            if isinstance(p.get("selection"), dict) and too_wide(p["selection"].get("band"))}
    if not wide:
        return
    said = "; ".join(f"M={m}: tie band of {s['band']:.0%}" + (
        f", the best candidate took {s['margin']:.1%} less time than the default"
        if isinstance(s.get("margin"), (int, float)) and s["margin"] > 0 else "") for m, s in wide.items())
    _warn(f"{entry['path'].name}: {said}; decided with a tie band over {WIDE_BAND:.0%}, too noisy to tell the configs "
          f"apart: sweep {'it' if len(wide) == 1 else 'them'} again on a quieter machine before shipping", stacklevel=4)


def _warn_far(spec, name: str, table: dict) -> None:
    far = far_batch_sizes(table) if spec.batch_axis == "M" else []  # SGLang's sizes count tokens: M only
    if far:
        served = ", ".join(f"{m} (from M={e})" for m, e in far)
        _warn(f"{name}: entries M={','.join(map(str, sorted(table, key=int)))}; lookup would serve batch sizes "
              f"{served} an entry more than {FAR_FROM_ENTRY}x away, tuned for another regime; sweep those batch "
              f"sizes too, or delete the file to leave the shape to the heuristic default", stacklevel=4)


def _warn_shipped(entry: dict, table: dict) -> None:
    """A file in SGLang's fused-MoE format (written by its render) whose name SGLang's own package also ships is
    not read at all by a server pointed at the export's folder (SGLANG_MOE_CONFIG_DIR replaces SGLang's folder): each
    of its batch sizes the exported file lacks would run this file's nearest entry instead of the one SGLang ships,
    and nothing else would say so. (Recognised by the renderer, not by a field of the kernel's spec: an edit inside
    a kernel folder changes its tuning key, and every stored trial of it would have to be measured again.)"""
    from flytune_nb.artifacts import sglang

    if entry["spec"].artifact_render is not sglang.render:
        return
    versions = sorted({str((p.get("toolchain") or {}).get("triton") or "") for p in entry["prov"].values()} - {""})
    if not versions:
        import triton

        versions = [triton.__version__]
    found = sglang.shipped_file(entry["path"].name, versions[-1])
    if found is None:
        return
    where, shipped = found
    mine = sorted(int(m) for m in table)
    lost = [m for m in sorted(shipped) if m not in mine]
    if not lost:
        return
    by_entry: dict[int, list[int]] = {}
    for m in lost:  # lookup's rule on a file written ascending: a tie to the smaller
        by_entry.setdefault(min(mine, key=lambda e: (abs(e - m), e)), []).append(m)
    served = "; ".join(f"M={e}'s for {','.join(map(str, ms))}" for e, ms in sorted(by_entry.items()))
    _warn(f"{entry['path'].name}: SGLang ships a file of this name ({where.parent.name} in its package) with batch "
          f"sizes {','.join(map(str, lost))}, which this export lacks; a server reading this folder "
          f"(SGLANG_MOE_CONFIG_DIR) never reads SGLang's file, and runs them with this file's nearest entry "
          f"({served}). Sweep them too (--grid \"M={','.join(map(str, sorted(set(mine) | set(lost))))} ...\"), or copy "
          f"{where} to {entry['path']} before exporting (export keeps a file's other batch sizes)", stacklevel=4)


def far_batch_sizes(table: dict) -> list[tuple[int, int]]:
    """(batch size, the entry lookup serves it) for SGLang's batch sizes below a file's largest entry whose nearest
    entry is more than FAR_FROM_ENTRY times larger or smaller. Above the largest entry the file is as SGLang's own
    files are."""
    ms = sorted(int(m) for m in table)
    if not ms:
        return []
    far = []
    for m in SGLANG_BATCH_SIZES:
        if m >= ms[-1]:
            break
        near = min(ms, key=lambda e: (abs(e - m), e))  # lookup's rule on a file written ascending: a tie to the smaller
        if max(m, near) > FAR_FROM_ENTRY * min(m, near):
            far.append((m, near))
    return far


def _clean(d: dict) -> dict:
    """JSON has no NaN: unknown numbers become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

