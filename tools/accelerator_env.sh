# Sourced by tools/accelerator_check.sh and tools/accelerator_rows.sh on a machine that has JAX
# for its accelerator but not the lock's pure-Python pins and no network (docs/accelerators.md):
# installs the wheels carried in .whl/ (git-ignored) and the suite, sets $py and the environment.
# $1: the calling script's name, for its messages.
me=${1:-accelerator_env.sh}
py=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "$me: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The suite itself, editable: lra.models, lra.tasks and lra.configs are the repository's folders.
if ! "$py" -m pip install -q --no-deps --no-build-isolation -e . >/tmp/lra_install.log 2>&1; then
  # No build tools there: the same one `lra` package made of links. PYTHONSAFEPATH keeps
  # `python -m` from finding the checkout's bare lra/ (without models/) first.
  echo "$me: 'pip install -e .' failed (/tmp/lra_install.log); linking" >&2
  rm -rf /tmp/lra_pkg && mkdir -p /tmp/lra_pkg/lra && ln -s "$PWD"/lra/* /tmp/lra_pkg/lra/ &&
    for d in models tasks configs; do ln -s "$PWD/$d" /tmp/lra_pkg/lra/$d; done || exit 1
  export PYTHONPATH=/tmp/lra_pkg${PYTHONPATH:+:$PYTHONPATH} PYTHONSAFEPATH=1
fi
# Tests, bench records, probes and runs share the accelerator one after another: take memory as
# needed.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
