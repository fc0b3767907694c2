#!/usr/bin/env bash
# mypy --strict over infralab.sim (sim/), the shared layer (infralab/) and infralab.agent.validators
# (agent/validators/); configuration in pyproject.toml, [tool.mypy].
#
# setup.py maps the top-level folders sim/, kernels/, agent/, real/ and experiments/ to packages under
# `infralab`, and the editable install resolves them with an import finder mypy cannot follow. So the
# package is rebuilt as a tree of symlinks under build/typecheck/infralab/ (every entry of infralab/, plus
# the mapped folders by their package names) and mypy runs from there; the packages not checked are read
# for their types only (follow_imports = "silent").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mypy="${MYPY:-$root/.venv/bin/mypy}"
tree="$root/build/typecheck"
pkg="$tree/infralab"

rm -rf "$pkg"
mkdir -p "$pkg"
for entry in "$root"/infralab/*; do
    case "$(basename "$entry")" in __pycache__) continue ;; esac
    ln -s "$entry" "$pkg/$(basename "$entry")"
done
for part in sim kernels agent real experiments; do
    ln -s "$root/$part" "$pkg/$part"
done

# The shared layer: infralab/'s own modules and sub-packages (not the folders mapped into it).
shared=()
for entry in "$root"/infralab/*; do
    name="$(basename "$entry")"
    case "$name" in __pycache__) continue ;; esac
    if [[ "$name" == *.py || -f "$entry/__init__.py" ]]; then shared+=("infralab/$name"); fi
done

cd "$tree"
exec "$mypy" --config-file "$root/pyproject.toml" --cache-dir "$tree/.mypy_cache" \
    infralab/sim infralab/agent/validators "${shared[@]}" "$@"
