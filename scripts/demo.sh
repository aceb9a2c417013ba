#!/usr/bin/env bash
# The main job, on a fresh machine: set up, then route the rtopic plugin's README examples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for key in 'server1.app1.mod1.info' '*.app1.mod1.info' '#.info' '#.mod1.info' '#' \
           'server1.app1.mod1.*' 'server1.app1.#'; do
    printf '%-26s -> %s\n' "$key" "$(.venv/bin/rtroute route --bindings examples/bindings.toml "$key" | tr '\n' ' ')"
done
