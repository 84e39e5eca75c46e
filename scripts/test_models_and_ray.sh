#!/usr/bin/env bash
# `make test`'s second pass: the tests that start Ray and the other real-model tests, in two pytest processes
# side by side, each running its tests one at a time. One process holds every Ray test, so one private Ray
# runs at a time (test_ray_data's kill -9 test diffs /tmp's Ray folders); a Ray test's waits (Ray starting, a
# 2-node cluster placing actors) then overlap the other process's decoding. pytest-xdist's `--dist loadgroup`
# would say this in one process, but pytest 9.2 ignores its groups (pytest-dev/pytest-xdist#1386).
# The demo's index of the sample vault (tests/conftest.py demo_run) is made once, by whichever needs it first,
# in a folder both share. Each process's output is printed when both are done; the exit status is the first
# failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
shared=$(mktemp -d)
trap 'rm -rf "$shared"' EXIT
export FANOUT_TEST_SHARED_DIR=$shared PYTHONDONTWRITEBYTECODE=
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider "$@")
"${pytest[@]}" -m "ray" >"$shared/ray.log" 2>&1 &
ray=$!
"${pytest[@]}" -m "model and not ray" >"$shared/models.log" 2>&1 &
models=$!
wait "$ray"; ray_rc=$?
wait "$models"; models_rc=$?
printf '\n== the Ray tests (exit %s)\n' "$ray_rc"; cat "$shared/ray.log"
printf '\n== the other model tests (exit %s)\n' "$models_rc"; cat "$shared/models.log"
[ "$ray_rc" = 0 ] || exit "$ray_rc"
exit "$models_rc"
