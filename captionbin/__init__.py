"""Thin command-line binaries of captionlib: ``python -m captionbin.caption_<verb>``."""
