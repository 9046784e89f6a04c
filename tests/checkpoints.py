"""Checks shared by the tests of the published-checkpoint loaders (PANNs, audio ConvNeXt)."""

import pytest
import torch


def assert_load_fails(path, state, encoder, load, feats_config, error):
    """Save ``state`` in the authors' layout at ``path``; loading it into ``encoder`` with
    ``load(encoder, path, feats_config)`` must raise ``error`` naming the file and change no
    weight (never a partial load). Returns the error."""
    torch.save({"model": state, "iteration": 1}, path)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    with pytest.raises(error) as e:
        load(encoder, str(path), feats_config)
    assert str(path) in str(e.value)
    assert all(torch.equal(v, before[k]) for k, v in encoder.state_dict().items())
    return e.value
