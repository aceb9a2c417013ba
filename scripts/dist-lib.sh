# Shared by scripts/check-sdist.sh and scripts/build-dist.sh (sourced, not run): what the
# project claims, where its Pythons are, and a clean copy of the checkout to build from.

# read_project PYTHON WHAT: from pyproject.toml (run from the top of the checkout), with PYTHON
# (tomllib or tomli importable)
#   pythons : the Python versions claimed by the classifiers, X.Y per line, oldest first
#   requires: the build requirements, one per line
#   floors  : the floor of each build requirement and of pika, name==X per line
#   version : the project's version
read_project() {
    "$1" - "$2" <<'EOF'
import re, sys
try:
    import tomllib
except ImportError:
    import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)
if sys.argv[1] == "pythons":
    for c in project["project"]["classifiers"]:
        m = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c)
        if m:
            print(m.group(1))
elif sys.argv[1] == "version":
    print(project["project"]["version"])
elif sys.argv[1] == "requires":
    print("\n".join(project["build-system"]["requires"]))
else:
    pika = [d for d in project["project"]["dependencies"] if re.match(r"pika\b", d)]
    for requirement in project["build-system"]["requires"] + pika:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([^,\s]+)\s*,.*", requirement)
        if not m:
            sys.exit(f"pyproject.toml: {requirement!r} is not a range >=X,<Y")
        print(f"{m.group(1)}=={m.group(2)}")
EOF
}

# find_python X.Y: prints an interpreter of that version that can make venvs and compile
# extensions (python3.X on PATH, under pyenv, in /usr/local/bin or /usr/bin), or nothing.
find_python() {
    local version=$1 candidate pyenv_root
    pyenv_root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
    for candidate in "$(command -v "python$version" 2>/dev/null || true)" \
        $(ls -d "$pyenv_root/versions/$version".*/bin/"python$version" 2>/dev/null | sort -V -r) \
        "/usr/local/bin/python$version" "/usr/bin/python$version"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] || continue
        # pyenv's shims exist for every version but run only the selected ones: ask each
        if "$candidate" -c "
import sys, sysconfig, os, venv, ensurepip
assert '%d.%d' % sys.version_info[:2] == '$version'
assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))
" 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
}

# copy_checkout DEST: the files of a clean clone plus untracked work (git's view), never the
# build products lying in the tree; a whole copy when this is not a git checkout.
copy_checkout() {
    local dest=$1 name
    if [ -d .git ]; then
        git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' name; do
            [ -f "$name" ] || continue  # deleted in the work tree
            mkdir -p "$dest/$(dirname "$name")"
            cp -p "$name" "$dest/$name"
        done
    else
        cp -rp . "$dest"
    fi
}
