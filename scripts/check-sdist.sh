#!/usr/bin/env bash
# Does the sdist install, and work, on the Pythons we claim?
#
# 1. Builds the sdist and, from it, the wheel (python -m build) out of a clean copy of the
#    checkout: the files of a clean clone plus untracked work, never build products in the tree.
# 2. For the oldest and the newest Python of pyproject.toml's classifiers (requires-python is
#    the oldest; --all: every one claimed), found as python3.X on PATH or under pyenv: a fresh
#    venv, the *sdist* installed into it with the test extra and RTROUTE_REQUIRE_NATIVE=1 (the
#    native core compiles from the sdist alone, or the install fails), then the quick tier
#    (tests/quick.txt: the pure tests), run against that install with RTROUTE_EXPECT_NATIVE=1,
#    and every module imported.
#      oldest: the floors of the ranges (setuptools, Cython, pika at their >= versions; built
#              without isolation), so a floor that no longer works is caught;
#      newest: what pip picks (the newest in each range), in an isolated build as users get it.
#
# Usage: scripts/check-sdist.sh [--all]. A claimed Python that is not installed fails the check
# (RTROUTE_SDIST_ALLOW_MISSING=1 skips it instead, saying so). RTROUTE_SDIST_KEEP=1 keeps the
# work directory (the venvs, the logs, dist/). RTROUTE_SDIST_OUT=DIR copies the sdist, the
# wheel and the build's log there (scripts/test.sh hands them to tests/packaging, which
# then checks these instead of building them again). About 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# read_project, find_python, copy_checkout
source scripts/dist-lib.sh
all=0
case ${1:-} in
    --all) all=1 ;;
    "") ;;
    *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

say() { echo "check-sdist: $*"; }
SECONDS=0
work=$(mktemp -d "${TMPDIR:-/tmp}/rtroute-sdist.XXXXXX")
if [ "${RTROUTE_SDIST_KEEP:-0}" = 1 ]; then
    say "work directory: $work (kept)"
else
    trap 'rm -rf "$work"' EXIT
fi

# The Python that builds: the project's venv when it has `build` (the test extra), else a tool
# venv of its own.
host=.venv/bin/python
if ! [ -x "$host" ] || ! "$host" -c "import build" 2>/dev/null; then
    "$(command -v python3)" -m venv "$work/tools"
    "$work/tools/bin/python" -m pip install -q build >"$work/tools.log" 2>&1 \
        || { tail -20 "$work/tools.log"; exit 1; }
    host=$work/tools/bin/python
fi

# From pyproject.toml: the Python versions claimed (X.Y per line, oldest first), the build
# requirements, and the floor of each range we build and run with (name==X).
text=$(read_project "$host" pythons); mapfile -t claimed <<<"$text"
text=$(read_project "$host" requires); mapfile -t requires <<<"$text"
text=$(read_project "$host" floors); mapfile -t floors <<<"$text"
[ -n "${claimed[0]}" ] || { say "FAILED: pyproject.toml claims no Python version" >&2; exit 1; }
oldest=${claimed[0]}
newest=${claimed[${#claimed[@]}-1]}
if [ "$all" = 1 ]; then wanted=("${claimed[@]}"); else wanted=("$oldest"); [ "$newest" = "$oldest" ] || wanted+=("$newest"); fi
say "claimed: Python ${claimed[*]}; testing ${wanted[*]}; floors: ${floors[*]}"

say "building the sdist and the wheel"
tree=$work/tree
copy_checkout "$tree"
RTROUTE_REQUIRE_NATIVE=1 "$host" -m build --outdir "$work/dist" "$tree" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log"; say "FAILED: python -m build" >&2; exit 1; }
sdist=$(ls "$work"/dist/*.tar.gz)
wheel=$(ls "$work"/dist/*.whl)
for f in "$sdist" "$wheel"; do say "  $(basename "$f") ($(du -k "$f" | cut -f1) KiB)"; done
listing=$("$host" -m zipfile -l "$wheel")
for member in 'rtroute/py\.typed' 'rtroute/core/_native\..*\.so'; do
    grep -Eq "^$member " <<<"$listing" || { say "FAILED: the wheel lacks $member" >&2; exit 1; }
done
if grep -i "deprecat" "$work/build.log"; then
    say "FAILED: the build prints deprecation warnings (above)" >&2
    exit 1
fi
say "built in ${SECONDS} s"
if [ -n "${RTROUTE_SDIST_OUT:-}" ]; then   # for the packaging tests of the same run
    rm -rf "$RTROUTE_SDIST_OUT"
    mkdir -p "$RTROUTE_SDIST_OUT"
    cp "$sdist" "$wheel" "$work/build.log" "$RTROUTE_SDIST_OUT/"
fi

# The quick tier (tests/quick.txt, also `scripts/test.sh --leg quick`): the pure tests, on the
# core and the layers on it, the relay on its stub broker, the config readers, pika's internals.
mapfile -t tests < <(grep -v -e '^#' -e '^[[:space:]]*$' tests/quick.txt)
import_all='
import importlib, pkgutil, rtroute, rtroute.core
assert rtroute.core.IMPLEMENTATION == "native", rtroute.core.FALLBACK_REASON
optional = {"pyspark", "pyarrow", "pandas", "marisa_trie", "matplotlib"}  # extras, not here
names = [m.name for m in pkgutil.walk_packages(rtroute.__path__, "rtroute.")]
for name in names:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name.split(".")[0] not in optional:
            raise
print(len(names), "modules from", rtroute.__path__[0])
'

status=0
summary=()
for version in "${wanted[@]}"; do
    started=$SECONDS
    python=$(find_python "$version")
    if [ -z "$python" ]; then
        if [ "${RTROUTE_SDIST_ALLOW_MISSING:-0}" = 1 ]; then
            summary+=("Python $version: SKIPPED, not installed (RTROUTE_SDIST_ALLOW_MISSING=1)")
        else
            summary+=("Python $version: FAILED, not installed (looked for python$version on PATH, under pyenv, in /usr/bin and /usr/local/bin)")
            status=1
        fi
        continue
    fi
    venv=$work/py$version
    log=$work/py$version.log
    "$python" -m venv "$venv"
    say "Python $version ($python): installing the sdist"
    # --no-cache-dir: pip would otherwise reuse a wheel it built from a file of the same name
    if [ "$version" = "$oldest" ]; then
        what="floors"
        install_sdist() {
            "$venv/bin/pip" install --no-cache-dir "${floors[@]}" \
                && RTROUTE_REQUIRE_NATIVE=1 "$venv/bin/pip" install --no-cache-dir \
                    --no-build-isolation "$sdist[test]" "${floors[@]}"
        }
    else
        what="newest in range"
        install_sdist() {
            RTROUTE_REQUIRE_NATIVE=1 "$venv/bin/pip" install --no-cache-dir "$sdist[test]"
        }
    fi
    if ! install_sdist >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" | tail -30
        summary+=("Python $version: FAILED to install the sdist ($what; $log)")
        status=1
        continue
    fi
    # the versions built and run with (an isolated build's: those pip picks for the requires)
    if [ "$what" = floors ]; then
        used="${floors[*]}"
    else
        used="$("$venv/bin/pip" install --dry-run --ignore-installed --no-deps --no-cache-dir \
            "${requires[@]}" 2>/dev/null | sed -n 's/^Would install //p')"
        used+=" $("$venv/bin/pip" list --format=freeze 2>/dev/null | grep -i '^pika==')"
    fi
    # from the work directory: the checkout's rtroute/ must not shadow the installed one
    if ! (cd "$work" && "$venv/bin/python" -c "$import_all") >>"$log" 2>&1; then
        tail -20 "$log"
        summary+=("Python $version: FAILED to import the installed package ($log)")
        status=1
        continue
    fi
    say "Python $version: $(tail -1 "$log"); running the tests"
    run=0
    (cd "$work" && RTROUTE_EXPECT_NATIVE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -m "not broker" \
        "${tests[@]/#/$ROOT/}") || run=$?
    if [ "$run" = 0 ]; then
        summary+=("Python $version: passed in $((SECONDS - started)) s ($what: $used)")
    else
        summary+=("Python $version: FAILED, pytest status $run ($what: $used)")
        status=1
    fi
done

say "summary (${SECONDS} s in all):"
for line in "${summary[@]}"; do say "  $line"; done
exit "$status"
