"""Do the committed exports still hold on this GPU, against their exported latency and their heuristic default?

Compares every committed config for this GPU (flytune_nb/exports/, or --dir) re-timed now with its exported latency
(provenance) and with the kernel's heuristic default timed beside it: the same judgement as `flytune check` (WARN
above 1.10x, FAIL above 1.15x or on any wrong result; a slowdown must also exceed the timer's noise floor, and a
file's drift of its defaults is allowed for), recorded as a result with its environment. `flytune check` is the
gate with an exit code; this is its record. Each entry and its default are timed with the default timer,
suspect rows re-timed: several minutes for the 396 H200 entries.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks.common import env_line, environment, need_gpu, parser, write
from flytune_nb.errors import UsageError


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--dir", type=Path, default=None,
                    help="config folder (default: $FLYTUNE_CONFIG_DIR or the package's exports)")
    ap.add_argument("--min-delta-us", type=float, default=None,
                    help="slowdowns smaller than this many microseconds are noise (default: flytune check's)")
    ap.add_argument("--path", action="append", default=[], help="extra kernel folder (repeatable)")
    args = ap.parse_args(argv)
    from flytune_nb.artifacts.gate import MIN_DELTA_US, check, to_json, to_markdown
    from flytune_nb.core.device import current_device
    from flytune_nb.serve.lookup import config_dir

    floor = MIN_DELTA_US if args.min_delta_us is None else args.min_delta_us
    if not 0 <= floor < float("inf"):
        ap.error(f"--min-delta-us must be a number >= 0, got {args.min_delta_us}")
    directory = config_dir(args.dir)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a folder")
    need_gpu("export_check")
    dev = current_device()
    rows = check(directory, device=dev, paths=args.path, min_delta_us=floor)
    env = environment()
    counts = Counter(r.status for r in rows)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("OK", "WARN", "FAIL"))
    table = to_markdown(rows, dev.name).split("\n", 1)[1] if rows else "\nNo committed configs for this device.\n"
    md = "\n".join([f"# Committed exports re-checked on {dev.name}: {len(rows)} configs, {summary}", env_line(env),
                    f"Noise floor {floor:g} us.", table.rstrip()])
    write("export_check", {"env": env, "dir": str(directory), "min_delta_us": floor, "counts": dict(counts),
                           "rows": json.loads(to_json(rows))}, md, out=args.out)


if __name__ == "__main__":
    main()
