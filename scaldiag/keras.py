"""Record a Keras 3 training run from code:

    from scaldiag.keras import ScaldiagCallback
    model.fit(x, y, batch_size=256, callbacks=[ScaldiagCallback()])

The public name; the adapter lives in ``scaldiag.collect.frameworks.keras_callback``.
"""

import keras

from scaldiag.collect.frameworks.keras_callback import ScaldiagCallback
from scaldiag.collect.frameworks.keras_hooks import patch_fit

# fit hands its data and batch size to the ScaldiagCallbacks it is given (it adds none).
patch_fit(keras.Model, add_callback=False)

__all__ = ["ScaldiagCallback"]
