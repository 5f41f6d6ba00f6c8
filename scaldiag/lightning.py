"""Record a PyTorch Lightning ``Trainer.fit`` from code:

    from scaldiag.lightning import ScaldiagCallback

    trainer = L.Trainer(max_epochs=3, callbacks=[ScaldiagCallback()])
    trainer.fit(model, train_loader, val_loader)

The callback is the one ``scaldiag profile`` adds to every Trainer
(``scaldiag.collect.frameworks.lightning_adapter``): the sanity check and validation marked as
evaluation, Lightning's epochs, checkpoints, its steps from the optimizer. Used on its own it
records the fit into a run directory (``callback.run_dir``; ``scaldiag report RUN_DIR`` or
``scaldiag.load``); under ``profile`` or inside ``scaldiag.capture()`` it records into theirs.
Importing this module imports Lightning (``lightning.pytorch``, else ``pytorch_lightning``).
"""

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from scaldiag.collect.frameworks.lightning_adapter import callback_class

ScaldiagCallback = callback_class(Callback)

__all__ = ["ScaldiagCallback"]
