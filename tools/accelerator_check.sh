#!/usr/bin/env bash
# tools/accelerator_check.py on a machine that has JAX for its accelerator but not the lock's
# pure-Python pins and no network (docs/accelerator_check.md). From the repository root:
#   bash tools/accelerator_check.sh OUT_DIR [COMMIT] [more accelerator_check.py options]
# The pins come as wheels in .whl/ (git-ignored; docs/accelerator_check.md says how to make them).
set -u
out=${1:?usage: bash tools/accelerator_check.sh OUT_DIR [COMMIT] [accelerator_check.py options]}
shift
commit=${1:-}
[ $# -gt 0 ] && shift
. tools/accelerator_env.sh accelerator_check.sh
exec "$py" tools/accelerator_check.py --out "$out" ${commit:+--commit "$commit"} "$@"
