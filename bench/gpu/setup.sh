# Sourced by the GPU scripts, from the project root on the GPU machine with .whl carried:
# installs the carried Keras wheels and points Python at them and at this checkout.
# $1: the folder to collect results in (tarred into $OUT by the caller).
FINAL_OUT=$OUT
OUT=$1
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax CUDA_DEVICE_ORDER=PCI_BUS_ID
