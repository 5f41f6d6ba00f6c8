# Sourced by the GPU scripts, from the project root on the GPU machine with .whl carried:
# installs the carried Keras wheels, builds scaldiag's C parts for that machine's Python, and points
# Python at them and at this checkout.
# $1: the folder to collect results in (tarred into $OUT by the caller).
FINAL_OUT=$OUT
OUT=$1
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | grep -v "already exists"
# The checkout comes without its built extensions (ignored files), and this machine's Python is not
# this one's: without them the Kineto reader is about 4x slower, and on 2026-12-06 every PyTorch
# case's analysis ran past its time limit. Best effort: a machine with no compiler says so and goes on.
# (The extensions are optional in setup.py, so build_ext succeeds without them: the import tells.)
python3 setup.py -q build_ext --inplace > /tmp/build_ext.log 2>&1
python3 -c "import scaldiag.readers._kineto_scan, scaldiag.readers.xplane._wire" 2>/dev/null \
  && echo "scaldiag C parts built" || { echo "scaldiag C parts NOT built (numpy and json.loads, ~4x slower):"; tail -3 /tmp/build_ext.log; }
export PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax CUDA_DEVICE_ORDER=PCI_BUS_ID

# The card, its driver, the cores and the frameworks' versions, into the file $1 (a runner's env.txt).
gpu_env() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
    python3 -c "import jax, keras, torch, sys; print('python', sys.version.split()[0], 'jax', jax.__version__, 'keras', keras.__version__, 'torch', torch.__version__)"
  } > "$1" 2>&1
}
