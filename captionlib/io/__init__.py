"""Data directories (scp/text/utt2spk files), feature readers/writers (ark, HDF5), feature stats,
importers of precomputed features (:mod:`captionlib.io.importers`).

The corpus preparation (Clotho, AudioCaps, COCO, MSR-VTT, MSVD) is in :mod:`captionlib.corpora`.

Public API::

    from captionlib.io.datadir import read_scp, write_scp, read_text, read_spk2utt, feats_dim
    from captionlib.io.feats import FeatReader, FeatWriter
"""
