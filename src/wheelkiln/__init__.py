"""wheelkiln: build heavy native Python wheels fast and honestly."""

__version__ = "0.1.0"
