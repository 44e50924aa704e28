#!/usr/bin/env bash
# Mutation testing of the orchestration code ([tool.mutmut] in pyproject.toml says which
# files are mutated and which fast tests judge them). Results: tests/README.md.
#
#   tests/mutation.sh               every mutant (hours on a 2-core machine)
#   SAMPLE=500 tests/mutation.sh    a seeded random sample of that many (SEED=11222026)
#   SAMPLE=500 TAKE=200 ...         the first 200 of that draw (itself a uniform sample)
#   SAMPLE=500 SKIP=200 ...         the rest of that draw
#   tests/mutation.sh NAME...       these mutants again (after a test was added)
#
# CHILDREN=2 runs two mutants at once (default 1). Changing [tool.mutmut] discards results.
# PROFILE=hosts uses tests/mutation/hosts.toml instead of [tool.mutmut] (the host, trial,
# training, checkpoint, memory, signature and hooks modules), in a copy of the tree in
# .mutation/hosts/ (its own mutants/ and mutants-run.log); only the mutants matching its
# pattern are sampled. PROFILE=since (tests/mutation/since.toml): the code issue 40 names.
# PROFILE=recent (tests/mutation/recent.toml): the code written since 9015a28 (issue 53);
# only the mutants of the functions changed since then are sampled (changed_functions.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$(test -x .venv/bin/python && echo "$PWD/.venv/bin/python" || echo python)}
FIRST='msexp.cli.app.x__exit__mutmut_1'  # any one mutant: its run makes all of them
MATCH='.'
if [[ -n "${PROFILE:-}" ]]; then
  work=.mutation/$PROFILE
  mkdir -p "$work"
  mkdir -p "$work/mlruns"  # as in the checkout: tests lock the default journal's folder
  for item in msexp tests sweeps benchmarks docs experiments README.md; do
    rm -rf "${work:?}/$item"
    cp -a "$item" "$work/$item"
  done
  # the project's pyproject.toml with the profile's [tool.mutmut] instead of its own
  { sed '/^\[tool\.mutmut\]/,/^\[/{/^\[tool\.mutmut\]/d;/^\[/!d}' pyproject.toml
    cat "tests/mutation/$PROFILE.toml"; } > "$work/pyproject.toml"
  cd "$work"
  case $PROFILE in
    hosts)
      FIRST='msexp.execution.slots.xǁSlotsǁkeep__mutmut_1'
      MATCH='^msexp\.(execution|training|hooks)\.|^msexp\.fence\.|^msexp\.knobs\.x_graph_params__' ;;
    since) FIRST='msexp.search.versions.x_newest__mutmut_1' ;;
    recent)  # only the functions and methods changed from BASE (9015a28) to TIP (HEAD)
      FIRST='msexp.os_tools.waiting.x_wait_until__mutmut_1'
      MATCH=$("$PY" tests/mutation/changed_functions.py "${BASE:-9015a28}" "${TIP:-HEAD}") ;;
  esac
fi
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
  mutate "$FIRST"  # makes every mutant and the test map
  mapfile -t names < <(statuses | "$PY" -c "
import random, re, sys
names = sorted(name for line in sys.stdin if line.strip()
               if re.search(r'$MATCH', name := line.split()[0].rstrip(':')))
print(*random.Random(${SEED:-11222026}).sample(names, ${SAMPLE}), sep='\n')")
  names=("${names[@]:${SKIP:-0}:${TAKE:-$SAMPLE}}")  # the draw's order is random: a part is a sample
  mutate "${names[@]}"
  statuses | grep -F -f <(printf '%s:\n' "${names[@]}") | awk '{$1=""; print}' | sort | uniq -c
else
  mutate "$@"
  statuses | awk '{$1=""; print}' | sort | uniq -c
fi
