#!/usr/bin/env bash
# Sets up verl beside reinforge as a side-by-side oracle (for developers; nothing in reinforge or its tests uses it).
#
#   bash scripts/verl_oracle.sh [DIR]     # DIR: where to put it; default a new temporary folder
#
# Downloads verl's newest wheel from PyPI without its dependencies (vLLM, CUDA builds, ...), unpacks it, and
# installs the few pure-Python packages its algorithm, metric and reward modules import into DIR/deps (never into
# the environment). Then, with the Python that runs reinforge:
#
#   PYTHONPATH=DIR/src:DIR/deps python -c "import verl.trainer.ppo.core_algos"
#
# imports verl's core_algos, metric_utils, reward_score and ray_trainer, so that a script can call reinforge's
# function and verl's on the same inputs and compare what they return. The differences this found, and the parts
# that match, are in the docs' "where reinforge differs from verl" lists.
set -euo pipefail
DIR=${1:-$(mktemp -d -t verl-oracle.XXXXXX)}
PY=${PYTHON:-python}
mkdir -p "$DIR/wheel" "$DIR/src" "$DIR/deps"
"$PY" -m pip download verl --no-deps -d "$DIR/wheel" -q
"$PY" -m zipfile -e "$(ls "$DIR"/wheel/verl-*.whl | head -1)" "$DIR/src"
"$PY" -m pip install -q --target "$DIR/deps" --no-deps tensordict pyvers torchdata codetiming pylatexenc
PYTHONPATH="$DIR/src:$DIR/deps" "$PY" -c "
import verl.trainer.ppo.core_algos, verl.trainer.ppo.metric_utils, verl.utils.reward_score, verl.trainer.ppo.ray_trainer
print('verl', verl.__version__, 'imports from', verl.__file__)"
echo "PYTHONPATH=$DIR/src:$DIR/deps"
