# Sourced on the device: install the wheels carried in .whl (optuna and its needs; jsonschema for Ray) and the
# trimmed Ray (its wheel is 79 MB, over the 64 MiB a call may carry: .whl/ray_trim.zip is the wheel without
# ray/jars (Java workers) and the dashboard's web build, 45 MB). Zip extraction drops the exec bits Ray's two
# daemons need, so they are set again.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1
if [ -f .whl/ray_trim.zip ]; then
  python3 -m zipfile -e .whl/ray_trim.zip /tmp/site && \
    chmod +x /tmp/site/ray/core/src/ray/gcs/gcs_server /tmp/site/ray/core/src/ray/raylet/raylet || return 1
fi
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
