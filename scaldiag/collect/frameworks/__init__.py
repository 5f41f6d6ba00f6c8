"""Framework adapters: everything that imports Keras, TensorFlow or JAX, imported lazily.

A new framework (PyTorch) gets its own modules here: a profiler window
(``tracing.py``), what a run is (``keras_info.py``), a capture hook.
"""
