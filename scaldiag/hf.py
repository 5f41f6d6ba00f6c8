"""Record a Hugging Face transformers ``Trainer.train`` from code:

    from scaldiag.hf import ScaldiagCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[ScaldiagCallback()])
    trainer.train()

The callback is the one ``scaldiag profile`` adds to every Trainer
(``scaldiag.collect.frameworks.hf_adapter``): the Trainer's epochs, logs, its clock
(``train_runtime``), the batch from its arguments, its steps from the optimizer. Used on its own it
records ``train()`` into a run directory (``callback.run_dir``; ``scaldiag report RUN_DIR`` or
``scaldiag.load``); under ``profile`` or inside ``scaldiag.capture()`` it records into theirs.
Evaluation and checkpoints inside ``train()`` are marked too: on its own, the callback arms the
adapters at ``on_train_begin`` (``Trainer.evaluate`` and ``_save_checkpoint`` wrapped until
``on_train_end``). transformers calls no callback when ``train()`` raises: that run is closed as
failed at the next ``train()``, by ``callback.close()``, by the next ``scaldiag.capture()`` or at
exit. Importing this module imports transformers.
"""

from transformers import TrainerCallback

from scaldiag.collect.frameworks.hf_adapter import callback_class

ScaldiagCallback = callback_class(TrainerCallback)

__all__ = ["ScaldiagCallback"]
