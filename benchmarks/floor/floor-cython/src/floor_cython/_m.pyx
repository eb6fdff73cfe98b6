# cython: language_level=3

def answer():
    """42, from the one Cython module."""
    return 42
