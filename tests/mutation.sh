#!/usr/bin/env bash
# Mutation testing of the orchestration code ([tool.mutmut] in pyproject.toml says which
# files are mutated and which fast tests judge them). Results: tests/README.md.
#
#   tests/mutation.sh               every mutant (hours on a 2-core machine)
#   SAMPLE=500 tests/mutation.sh    a seeded random sample of that many (SEED=11222026)
#   tests/mutation.sh NAME...       these mutants again (after a test was added)
#
# CHILDREN=2 runs two mutants at once (default 1). Changing [tool.mutmut] discards results.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$(test -x .venv/bin/python && echo .venv/bin/python || echo python)}
# Trial and CLI subprocesses must import the mutated copy, not this checkout.
# The folder must exist before Python starts, or the import system skips it for good.
export PYTHONPATH="$PWD/mutants:$PWD/tests/assets"
mkdir -p mutants
mutate() {
  nice -n 10 "$PY" -m mutmut run --max-children "${CHILDREN:-1}" "$@" >> mutants-run.log 2>&1 \
    || { tail -50 mutants-run.log; exit 1; }
}
statuses() { "$PY" -m mutmut results --all true 2>/dev/null; }
: > mutants-run.log
if [[ -n "${SAMPLE:-}" ]]; then
  mutate 'msexp.cli.app.x__exit__mutmut_1'  # makes every mutant and the test map
  mapfile -t names < <(statuses | "$PY" -c "
import random, sys
names = sorted(line.split()[0].rstrip(':') for line in sys.stdin if line.strip())
print(*random.Random(${SEED:-11222026}).sample(names, ${SAMPLE}), sep='\n')")
  mutate "${names[@]}"
  statuses | grep -F -f <(printf '%s:\n' "${names[@]}") | awk '{$1=""; print}' | sort | uniq -c
else
  mutate "$@"
  statuses | awk '{$1=""; print}' | sort | uniq -c
fi
