#!/usr/bin/env bash
# Mutation testing of the orchestration code, on one core ([tool.mutmut] in pyproject.toml
# says which files are mutated and which fast tests judge them). Results: tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$(test -x .venv/bin/python && echo .venv/bin/python || echo python)}
# Trial and CLI subprocesses must import the mutated copy, not this checkout.
# The folder must exist before Python starts, or the import system skips it for good.
export PYTHONPATH="$PWD/mutants:$PWD/tests/assets"
mkdir -p mutants
nice -n 10 "$PY" -m mutmut run --max-children "${CHILDREN:-1}" "$@" > mutants-run.log 2>&1 || { tail -50 mutants-run.log; exit 1; }
"$PY" -m mutmut export-cicd-stats >/dev/null 2>&1 || true
"$PY" -m mutmut results --all true | awk '{print $NF}' | sort | uniq -c
