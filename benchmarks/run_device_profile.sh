#!/usr/bin/env bash
# Device call 1 of session 4: where a sweep's fixed cost goes (benchmarks/startup_profile.py), before redesigning the
# precompile pool and the timing worker's start/stop for issue #3's cost and precompile targets.
set -uo pipefail
source benchmarks/device_common.sh
nproc; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
(cd benchmarks && timeout ${PROFILE_S:-400} python3 startup_profile.py) 2>&1 | grep -v Warning | tail -40
