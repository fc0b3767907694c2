#!/usr/bin/env bash
# mypy --strict over infralab.sim (sim/), the shared layer (infralab/) and infralab.agent.validators
# (agent/validators/); configuration in pyproject.toml, [tool.mypy].
#
# setup.py maps the top-level folders sim/, kernels/, agent/, real/ and experiments/ to packages under
# `infralab`, and the editable install resolves them with an import finder mypy cannot follow. So mypy
# runs from the package rebuilt as a tree of symlinks under build/typecheck/ (tools/package_tree.py);
# the packages not checked are read for their types only (follow_imports = "silent").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mypy="${MYPY:-$root/.venv/bin/mypy}"
tree="$root/build/typecheck"

"${PYTHON:-$root/.venv/bin/python}" "$root/tools/package_tree.py" "$tree"

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
