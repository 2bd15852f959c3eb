"""Pure NumPy/torch twins of the C++ kernels: the fallback and the test oracle."""
