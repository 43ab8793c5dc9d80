"""The trainer's own TensorFlow kernels: C++ ops (``*.cc``) beside the Python that wraps
them, for what stock TensorFlow 2.21 has no op for. ``build`` compiles them (cached by the
hash of the sources and TensorFlow's version), ``library`` loads them, and one module per
kernel wraps its ops (``disk_table``).

This package imports nothing else of the trainer's: every layer may use it.
"""
