#!/usr/bin/env bash
# tools/accelerator_rows.py on a lent GPU machine (JAX for its accelerator, the lock's pure-Python
# pins carried as wheels in .whl/, no network; docs/accelerators.md). From the repository root:
#   bash tools/accelerator_rows.sh OUT --budget-s N [--probe] [--quick] [more options]
# It advances the ledger's first unfinished row for N seconds and leaves its archive and report
# in OUT (at most 7 files: rows.md, rows.json, the archive's parts, step_probe.md|json).
set -u
out=${1:?usage: bash tools/accelerator_rows.sh OUT --budget-s N [--probe] [--quick]}
shift
. tools/accelerator_env.sh accelerator_rows.sh
exec "$py" tools/accelerator_rows.py --out "$out" "$@"
