"""scaldiag: why does training not scale with more GPUs?"""

__version__ = "0.1.0"
