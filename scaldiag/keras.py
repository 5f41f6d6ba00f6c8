"""Record a Keras 3 training run from code:

    from scaldiag.keras import ScaldiagCallback
    model.fit(x, y, batch_size=256, callbacks=[ScaldiagCallback()])

The public name; the adapter lives in ``scaldiag.collect.frameworks.keras_callback``.
"""

from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback

__all__ = ["ScaldiagCallback"]
