#!/usr/bin/env bash
# `make test`'s second pass: the tests that start Ray and the other real-model tests, in two pytest processes
# side by side, each running its tests one at a time. One process holds every Ray test, so one private Ray
# runs at a time (test_ray_data's kill -9 test diffs /tmp's Ray folders); a Ray test's waits (Ray starting, a
# 2-node cluster placing actors) then overlap the other process's decoding. pytest-xdist's `--dist loadgroup`
# would say this in one process, but pytest 9.2 ignores its groups (pytest-dev/pytest-xdist#1386).
# The demo's index of the sample vault (tests/conftest.py demo_run) is made once, by whichever needs it first,
# in a folder both share. The model tests print as they go; the Ray tests' output follows when both are done
# (a CI log is never silent for long); the exit status is nonzero when either failed (the Ray tests' first).
set -uo pipefail
cd "$(dirname "$0")/.."
shared=$(mktemp -d)
trap 'rm -rf "$shared"' EXIT
export FANOUT_TEST_SHARED_DIR=$shared PYTHONDONTWRITEBYTECODE=
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider "$@")
"${pytest[@]}" -m "ray" >"$shared/ray.log" 2>&1 &
ray=$!
trap 'kill "$ray" 2>/dev/null; rm -rf "$shared"' EXIT  # an interrupted run leaves no Ray tests going
printf '== the model tests without Ray (the Ray tests run beside them; their output follows)\n'
"${pytest[@]}" -m "model and not ray"
models_rc=$?
wait "$ray"; ray_rc=$?
printf '\n== the Ray tests (exit %s)\n' "$ray_rc"; cat "$shared/ray.log"
[ "$ray_rc" = 0 ] || exit "$ray_rc"
exit "$models_rc"
