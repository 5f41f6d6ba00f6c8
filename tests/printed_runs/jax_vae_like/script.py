"""(mnist_vae's print: its epoch, a metric, the time of the call and the evaluation.)
An epoch inside one compiled call: one jitted function runs ``lax.fori_loop`` (or ``lax.scan``)
over every batch of an epoch, as JAX scripts that keep the whole dataset on the device do; the
script times each call and evaluates after it.

    python tests/jax_epoch_call.py [--epochs 5] [--samples 60000] [--batch 32] [--scan]
"""

import argparse
import time

import jax
import jax.numpy as jnp
from jax import lax


def init(key, sizes):
    params = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (n_in, n_out)) / jnp.sqrt(n_in), jnp.zeros(n_out)))
    return params


def predict(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    logits = predict(params, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def make_epoch(batch: int, use_scan: bool):
    def sgd(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads), value

    @jax.jit
    def train_epoch(params, xs, ys, key):
        n = xs.shape[0] // batch
        order = jax.random.permutation(key, xs.shape[0])[: n * batch].reshape(n, batch)
        if use_scan:

            def step(params, idx):
                return sgd(params, xs[idx], ys[idx])

            params, losses = lax.scan(step, params, order)
            return params, losses.mean()

        def body(i, carry):
            params, total = carry
            idx = order[i]
            params, value = sgd(params, xs[idx], ys[idx])
            return params, total + value

        params, total = lax.fori_loop(0, n, body, (params, 0.0))
        return params, total / n

    return train_epoch


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(predict(params, x), axis=1) == y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--scan", action="store_true", help="lax.scan instead of lax.fori_loop")
    args = parser.parse_args()
    key = jax.random.PRNGKey(0)
    kx, ky, kp = jax.random.split(key, 3)
    xs = jax.random.normal(kx, (args.samples, 64))
    ys = jax.random.randint(ky, (args.samples,), 0, 10)
    params = init(kp, [64, 64, 10])
    train_epoch = make_epoch(args.batch, args.scan)
    for epoch in range(args.epochs):
        # JAX's examples/mnist_vae.py's clock: the epoch's call and the evaluation after it
        tic = time.time()
        params, mean_loss = train_epoch(params, xs, ys, jax.random.fold_in(key, epoch))
        acc = accuracy(params, xs[:2000], ys[:2000])
        print("{: 3d} {} ({:.3f} sec)".format(epoch, float(acc), time.time() - tic))  # noqa: UP032 (JAX's own line)


if __name__ == "__main__":
    main()
