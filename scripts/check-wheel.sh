#!/usr/bin/env bash
# specexp as a user installs it: the wheel built from this checkout, installed (not editable)
# in a fresh venv that borrows the dependencies this environment has installed, and run from another
# folder through both doors - `specexp --version` says which copy runs - with a model of the
# user's own (--config-dir, hydra.searchpath). The wheel must carry every file of conf/ and
# sweeps/. CI runs it (.ci/run); it needs `bash scripts/install.sh --first-run` before.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
package=$(mktemp -d)
trap 'rm -rf "$package"' EXIT
python -m pip wheel --no-deps -q -w "$package/wheels" .
# The dependencies borrowed from this environment (its site-packages on the new venv's path,
# after the venv's own): --system-site-packages would lend the base interpreter's instead,
# which a fresh machine's venv leaves bare.
python -m venv --without-pip "$package/venv"
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
python -c "$purelib" >"$("$package/venv/bin/python" -c "$purelib")/borrowed-dependencies.pth"
python -m pip --python "$package/venv/bin/python" install -q --no-deps --no-index "$package"/wheels/specexp-*.whl
# Every file of conf/ and sweeps/ in the wheel, and nothing else under specexp/conf/.
diff <(cd conf && find -L . -type f -printf '%P\n' | sort) \
  <(python - "$package"/wheels/specexp-*.whl <<'PY'
import sys
import zipfile

names = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join(sorted(n.removeprefix("specexp/conf/") for n in names if n.startswith("specexp/conf/"))))
PY
) >/dev/null || { echo "the wheel's specexp/conf/ is not conf/ with sweeps/" >&2; exit 1; }
mkdir -p "$package/own/model"
sed 's/^name: tiny-pair-small$/name: mine/' conf/model/tiny-pair-small.yaml >"$package/own/model/mine.yaml"
cd "$package"
unset PYTHONPATH
export MLFLOW_DISABLE_TELEMETRY=true
venv/bin/specexp --version | grep -F " from $package/venv/"
venv/bin/python -m specexp dry_run=true | grep -F "gemma3-270m.gguf" >/dev/null
venv/bin/specexp run --config-dir own model=mine dry_run=true | grep -F " model=mine "
venv/bin/specexp run "hydra.searchpath=[file://$package/own]" model=mine dry_run=true | grep -F " model=mine " >/dev/null
# The installed validator knows the user's options.
set +e
typo=$(venv/bin/python -m specexp -cd own model=mne 2>&1)
status=$?
set -e
[ "$status" = 2 ] && grep -qF "did you mean 'mine'?" <<<"$typo" || {
  echo "a user's typo: exit $status, not 2 with the nearest option named: $typo" >&2
  exit 1
}
echo "the wheel of $checkout runs from another folder through both doors"
