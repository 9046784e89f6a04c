"""Synthetic captioned soundscapes mixed from labelled event recordings (egs/soundscapes)."""
