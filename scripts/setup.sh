#!/usr/bin/env bash
# Create (once) and activate gridml's Python environment.
#
# The environment lives outside the clone, under $GRIDML_ENV_ROOT (default ~/.cache/gridml/envs),
# in a folder named by a hash of requirements/*.txt and the recipe version below, so a fresh clone
# (CI) reuses it and a changed pin builds a new one. Building it installs TensorFlow and compiles
# Horovod (about 9 minutes on 2 cores). `.venv` in the clone links to it.
# Usage: scripts/setup.sh            # build if needed, install gridml (editable) into it
set -euo pipefail
RECIPE=4   # bump when the build steps below change
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
PY="${GRIDML_PYTHON:-$(command -v python3.11 || command -v python3)}"
key="$( { echo "recipe=$RECIPE"; "$PY" -c 'import sys; print(sys.version_info[:2])'; cat requirements/base.txt requirements/horovod.txt; } | sha256sum | cut -c1-16)"
root="${GRIDML_ENV_ROOT:-$HOME/.cache/gridml/envs}"
env="$root/env-$key"
log() { printf '[setup] %s\n' "$*" >&2; }

build() {
  # Built in place: Horovod's libraries record the absolute path of OpenMPI's (rpath), so the
  # environment cannot be moved after the build. `.complete` is written last; a folder without it
  # is a crashed or interrupted build and is started again from scratch.
  rm -rf "$env"; mkdir -p "$root"
  log "building environment $env (first time for these pins: ~9 min)"
  "$PY" -m venv "$env"
  "$env/bin/python" -m pip install -q --upgrade pip setuptools wheel
  "$env/bin/python" -m pip install -q -r requirements/base.txt
  log "compiling Horovod with TensorFlow, Gloo and MPI"
  PATH="$env/bin:$PATH" HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j2 \
    "$env/bin/python" -m pip install -q --no-build-isolation --no-cache-dir -r requirements/horovod.txt
  # the proof that matters: two Gloo ranks start and talk
  PATH="$env/bin:$PATH" "$env/bin/horovodrun" --check-build >&2
  (cd /tmp && PATH="$env/bin:$PATH" "$env/bin/horovodrun" --gloo -np 2 -H localhost:2 \
    "$env/bin/python" -c "import horovod.tensorflow as h; h.init(); assert h.size() == 2") >/dev/null 2>&1 \
    || { log "Horovod was built but 2 Gloo ranks do not start"; exit 1; }
  touch "$env/.complete"
}

mkdir -p "$root"
exec 9>"$root/.lock-$key"
flock 9   # one build per key at a time; a second setup waits and then reuses it
if [ ! -f "$env/.complete" ]; then build; else log "reusing environment $env"; fi
ln -sfn "$env" .venv
# Light packages: every requirements/*.txt but the two above, torch.txt and numpy2.txt (below):
# extras, checks, ... layered on top and re-applied (incrementally, by pip) whenever one
# of them changes.
# (hpogrid.txt has a venv of its own, below; bench.txt is not a layer: benchmarks/metrics_api.py installs MLflow into a venv of its own,
# whose pins, protobuf 6+ among them, would break TensorFlow 2.15 here.)
light=$(ls requirements/*.txt | grep -v -e '/base.txt$' -e '/horovod.txt$' -e '/torch.txt$' -e '/bench.txt$' \
  -e '/numpy2.txt$' -e '/hpogrid.txt$')
extras_key="$(cat $light | sha256sum | cut -c1-16)"
if [ ! -f "$env/.extras-$extras_key" ]; then
  log "installing $(echo $light | tr '\n' ' ')"
  "$env/bin/python" -m pip install -q $(printf -- '-r %s ' $light) \
    -c <(grep -E '^(numpy|tensorflow-cpu|h5py)' requirements/base.txt; grep -E '^(protobuf|ml-dtypes)' requirements/torch.txt)
  rm -f "$env"/.extras-*; touch "$env/.extras-$extras_key"
fi
# PyTorch payload and ONNX (requirements/torch.txt): the same kind of light layer, re-applied when
# that file changes. torch==2.13.0 is the CPU wheel (about 50 s and 1.0 GB installed: torch 754 MB,
# onnx 80, onnxruntime 78, sympy 80, networkx 19), kept out of the environment's key so adding it
# never rebuilds TensorFlow/Horovod. GRIDML_NO_TORCH=1 skips it.
torch_key="$(sha256sum < requirements/torch.txt | cut -c1-16)"
if [ -z "${GRIDML_NO_TORCH:-}" ] && [ ! -f "$env/.torch-$torch_key" ]; then
  log "installing requirements/torch.txt (PyTorch CPU, ONNX; ~1 min)"
  "$env/bin/python" -m pip install -q -r requirements/torch.txt \
    -c <(grep -E '^(numpy|tensorflow-cpu|h5py)' requirements/base.txt)
  rm -f "$env"/.torch-*; touch "$env/.torch-$torch_key"
fi
# The numpy-2 layer (requirements/numpy2.txt): a venv of its own beside the environment, holding
# numpy 2.x and h5py only; a .pth line appends the environment's site-packages after its own, so
# torch, pytest, ... are importable without a second copy (torch 2.13 runs with numpy 1.x and 2.x)
# while its numpy 2 wins. Named by that file, the recipe and the environment it extends; reused
# when built (a file check), ~6 s and ~90 MB when not. `.venv-numpy2` in the clone links to it;
# tests/integration/test_numpy2_torch.py runs the PyTorch payload with its python.
# a venv's site-packages folder (the layers below append the environment's with a .pth line)
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
np2_key="$( { echo "recipe=1"; echo "$env"; cat requirements/numpy2.txt; } | sha256sum | cut -c1-16)"
np2="$root/numpy2-$np2_key"
if [ ! -f "$np2/.complete" ]; then
  log "building the numpy-2 layer $np2 (requirements/numpy2.txt; seconds)"
  rm -rf "$np2"
  "$env/bin/python" -m venv --without-pip "$np2"   # the environment's base interpreter
  "$env/bin/python" -m pip --python "$np2/bin/python" install -q -r requirements/numpy2.txt
  site_of "$env/bin/python" > "$(site_of "$np2/bin/python")/gridml-main-env.pth"
  "$np2/bin/python" -c 'import numpy, h5py; assert int(numpy.__version__.split(".")[0]) >= 2, numpy.__file__' \
    || { log "the numpy-2 layer does not import numpy 2 first"; exit 1; }
  touch "$np2/.complete"
fi
ln -sfn "$np2" .venv-numpy2
# The hpogrid layer (requirements/hpogrid.txt), built like the numpy-2 layer but with the
# environment's site-packages on its path before the install, so that pip adds only what the
# environment lacks: hpogrid and pandas. Kept out of the environment itself: Keras imports pandas
# whenever it is installed (keras/src/engine/data_adapter.py), ~1 s of CPU at every TensorFlow
# import of every Keras rank, and only tests/unit/test_phpo_steer.py's hpogrid comparison needs it.
# `.venv-hpogrid` in the clone links to it. An environment that still holds hpogrid from before
# (it used to be a light layer) has it and pandas removed first (else pip would find them there).
if "$env/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("hpogrid") is None)' 2>/dev/null; then
  log "removing hpogrid and pandas from $env (they live in the hpogrid layer now)"
  "$env/bin/python" -m pip uninstall -q -y hpogrid pandas >&2
fi
hp_key="$( { echo "recipe=1"; echo "$env"; cat requirements/hpogrid.txt; } | sha256sum | cut -c1-16)"
hp="$root/hpogrid-$hp_key"
if [ ! -f "$hp/.complete" ]; then
  log "building the hpogrid layer $hp (requirements/hpogrid.txt; seconds)"
  rm -rf "$hp"
  "$env/bin/python" -m venv --without-pip "$hp"
  site_of "$env/bin/python" > "$(site_of "$hp/bin/python")/gridml-main-env.pth"
  # (the environment's numpy pin as a file: pip --python runs pip again in the layer's python)
  grep -E '^numpy' requirements/base.txt > "$hp/constraints.txt"
  "$env/bin/python" -m pip --python "$hp/bin/python" install -q -r requirements/hpogrid.txt \
    -c "$hp/constraints.txt"
  "$hp/bin/python" -c 'from hpogrid.interface.idds.steering import SteeringIDDS' \
    || { log "the hpogrid layer does not import hpogrid's steering"; exit 1; }
  touch "$hp/.complete"
fi
ln -sfn "$hp" .venv-hpogrid
# Other Pythons the payload runtime must run on (GPU nodes bring 3.12 or 3.13): where this machine
# has one, a small venv of it with requirements/numpy2.txt (numpy 2 and h5py, no torch), listed in
# .payload-pythons for tests/integration/test_numpy2_torch.py. Reused when built; ~20 s each when
# not. A fresh CI machine has only 3.11: nothing is built and that test says so.
: > .payload-pythons
for v in 3.12 3.13; do
  for cand in "$(command -v "python$v" 2>/dev/null || true)" "$HOME"/.pyenv/versions/"$v".*/bin/python; do
    [ -x "$cand" ] && "$cand" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$v'" 2>/dev/null \
      || continue
    pv_key="$( { echo "recipe=1"; "$cand" -VV; cat requirements/numpy2.txt; } | sha256sum | cut -c1-16)"
    pv="$root/payload-py$v-$pv_key"
    if [ ! -f "$pv/.complete" ]; then
      log "building a Python $v venv for the payload runtime's tests ($cand)"
      rm -rf "$pv"
      if "$cand" -m venv "$pv" && "$pv/bin/python" -m pip install -q -r requirements/numpy2.txt >&2; then
        touch "$pv/.complete"
      else
        log "could not build it (left out): $pv"; rm -rf "$pv"; continue
      fi
    fi
    echo "$pv/bin/python" >> .payload-pythons
    break
  done
done
# gridml itself: editable, pointing at this clone (cheap; reruns re-point it to the newest clone).
"$env/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >&2
log "ready: $env"
