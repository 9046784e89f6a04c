"""Data directories (scp/text/utt2spk files), feature readers/writers (ark, HDF5), Clotho prep.

Public API::

    from captionlib.io.datadir import read_scp, write_scp, read_text, read_spk2utt
    from captionlib.io.feats import FeatReader, FeatWriter
"""
