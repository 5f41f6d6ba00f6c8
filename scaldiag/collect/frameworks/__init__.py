"""The loop adapters: everything that imports a framework (Keras, TensorFlow, JAX, PyTorch,
Lightning, transformers), imported lazily.

``adapters.py`` is the registry: each loop family's adapter, the framework modules whose import
arms it, and the evidence it brings (docs/profile.md, "The user's clock first"). ``guard.py`` is
the one guard of every hook. The rest are the adapters' parts: Keras (``keras_hooks``,
``keras_callback``, ``keras_info``), PyTorch (``torch_hooks``, ``torch_capture``, ``torch_modes``,
``torch_trace``, ``torch_device_clock``, ``torch_allreduce``), Lightning (``lightning_adapter``),
transformers (``hf_adapter``), JAX loops (``jax_loop``), and what several share: profiler windows
(``tracing``), compile evidence (``compile_marks``), the input (``input_marks``,
``input_ceiling``, ``input_free``). ``calibration`` is ``scaldiag calibrate``'s part inside PyTorch
and JAX (``collect/calibrate.py`` imports it when a measurement runs).
"""
