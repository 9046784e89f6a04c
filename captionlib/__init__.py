"""captionlib: captioning models trained with reinforcement learning (Kaldi/ESPnet-style recipes)."""

__version__ = "0.1.0"
