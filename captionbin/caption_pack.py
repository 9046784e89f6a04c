#!/usr/bin/env python3
"""Pack a trained model into one zip archive that needs nothing else from the recipe (stage 10).

The archive holds the model file, the resolved training config, the token list (or BPE
model), the feature config resolved as the feature binary's ``--print_config`` prints it
(``caption_dump_feats`` for ``--feats_type logmel``; ``caption_extract_visual_feats`` for
``--feats_type cnn``, with ``--media_type``), the normalisation statistics, the CIDEr-D document
frequencies, the decoding options of ``caption_decode --config <decode_config> <decode_args>``,
and a ``manifest.json`` (recipe, git revision, UTC date, the environments that trained the model
(``train_environment``: its dir's ``env.yaml`` files), sample rates of the training audio, the
metrics of ``--score_json``, and each file's size and SHA-256); see :mod:`captionlib.packed`.
For a CNN the archive holds what it needs: ``random_convnet`` its seed (in the feature config),
``exported`` the ``.pt2`` file itself, a torchvision name only the name, size and SHA-256 of its
weights file (not packed: ``caption_infer`` finds it in torchvision's cache, see
:func:`captionlib.packed.frontends.find_cnn_weights`). ``captionbin.caption_infer`` captions audio, image
or video files with it.

Usage:
    python -m captionbin.caption_pack --model_file exp/xe_x/valid.cider_d.best.pth \\
        --feats_config conf/feats_logmel.yaml --feats_stats exp/stats_logmel/feats_stats.npz \\
        --cider_df exp/stats_logmel/cider_df.npz --train_wav_scp data/development/wav.scp \\
        --decode_config conf/decode.yaml --score_json exp/xe_x/decode_x/evaluation/score.json \\
        --output exp/xe_x/packed/valid.cider_d.best.zip
    python -m captionbin.caption_pack --feats_type cnn --media_type video \\
        --feats_config conf/feats_cnn.yaml --model_file exp/xe_y/valid.cider_d.best.pth ... \\
        --output exp/xe_y/packed/valid.cider_d.best.zip
"""

import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from captionlib.utils.cli import config_dict, get_base_parser, parse_args, str2bool, str_or_none

REQUIRED = ("model_file", "feats_config", "feats_stats", "cider_df", "output")
# options of a caption_dump_feats / caption_extract_visual_feats job, not of the features: left
# out of the packed feature config
JOB_OPTIONS = ("wav_scp", "media_scp", "out_prefix", "filetype", "write_num_frames", "log_interval", "num_threads",
               "log_level")
FEATS_TYPES = ("logmel", "pretrained", "cnn")


def get_parser():
    """Return the argument parser of caption_pack."""
    parser = get_base_parser("Pack a trained model into one zip archive (stage 10)")
    parser.add_argument("--model_file", default=None, help="(required) model file written by training (.pth)")
    parser.add_argument("--train_config", type=str_or_none, default=None,
                        help="resolved training config (default: config.yaml beside --model_file)")
    parser.add_argument("--feats_type", default="logmel", choices=FEATS_TYPES,
                        help="logmel: audio (caption_dump_feats); pretrained: audio through a frozen encoder "
                             "(caption_dump_feats; its checkpoint is packed); cnn: images or videos "
                             "(caption_extract_visual_feats)")
    parser.add_argument("--feats_config", default=None,
                        help="(required) feature config of caption_dump_feats (logmel, pretrained) or "
                             "caption_extract_visual_feats (cnn)")
    parser.add_argument("--encoder_sha256", type=str_or_none, default=None,
                        help="feats_type pretrained: the SHA-256 of the encoder checkpoint the training features "
                             "were dumped with (stage 2's pretrained.sha256); another checkpoint file is refused")
    parser.add_argument("--media_type", default=None, choices=("image", "video"),
                        help="(required with --feats_type cnn) what the training data dir lists: image "
                             "(image.scp) or video (video.scp)")
    parser.add_argument("--feats_stats", default=None, help="(required) exp/stats_<feats_tag>/feats_stats.npz")
    parser.add_argument("--cider_df", default=None, help="(required) exp/stats_<feats_tag>/cider_df.npz")
    parser.add_argument("--trust_pickle", type=str2bool, default=False,
                        help="accept an old pickled --cider_df (cider_df.pkl; packed as .npz), read allowing "
                             "only numpy arrays and numbers: for files you made yourself (better: convert "
                             "it once with caption_convert_model)")
    parser.add_argument("--train_wav_scp", type=str_or_none, default=None,
                        help="wav.scp of the training set: the sample rates of its audio (headers) go into "
                             "the manifest, so inference can resample when the feature config has fs: null")
    parser.add_argument("--decode_config", type=str_or_none, default=None,
                        help="decode config of caption_decode: its beam_size, batch_size, max_len and "
                             "length_penalty become caption_infer's defaults")
    parser.add_argument("--decode_args", default="", help="extra caption_decode arguments, e.g. '--beam_size 3'")
    parser.add_argument("--score_json", type=str_or_none, default=None,
                        help="score.json of the decode the model is packed from (metrics in the manifest)")
    parser.add_argument("--recipe", type=str_or_none, default=None,
                        help="recipe name in the manifest (default: the current directory's name)")
    parser.add_argument("--output", default=None, help="(required) the zip archive to write")
    return parser


def _resolved(parser, config: Optional[str], args: Sequence[str] = (), what: str = "") -> dict:
    """The options of another binary's ``parser`` resolved from a config file (as ``--print_config``).

    Raises:
        FileNotFoundError: no ``config``.
        ValueError: a bad key or value, one line beginning with ``what`` (the other binary's
            usage was printed, as if caption_pack's command line were its).
    """
    if config is not None and not Path(config).is_file():
        raise FileNotFoundError(f"{config}: no such config file")

    def refuse(message: str):
        raise ValueError(f"{what or config}: {parser.locate(message)}")

    parser.error = refuse  # this parser only: one line, not the other binary's usage and exit 2
    return config_dict(parser.parse_args((["--config", config] if config else []) + list(args)))


def _feats_config(feats_type: str, config: str, media_type: Optional[str]) -> dict:
    """The packed feature config: ``config`` resolved by the feature binary of ``feats_type``,
    without its job options, with ``feats_type`` (and, for ``cnn``, ``media_type``) set. An audio
    config is resolved as stage 2 dumped with it: ``--feats_type`` on the command line wins over
    the config's key, and the result must fit it (``caption_dump_feats.check_feats_type``).

    Raises:
        ValueError: ``cnn`` without ``media_type``; an audio config that does not fit
            ``feats_type`` (e.g. a log-mel config with ``pretrained``), naming it;
        FileNotFoundError: no ``config``.
    """
    if feats_type == "cnn":
        if media_type is None:
            raise ValueError("--feats_type cnn needs --media_type image or video (the training data's media)")
        from captionbin.caption_extract_visual_feats import get_parser as feats_parser

        resolved = {"feats_type": feats_type, **_resolved(feats_parser(), config)}
    else:
        from captionbin.caption_dump_feats import check_feats_type
        from captionbin.caption_dump_feats import get_parser as feats_parser

        resolved = _resolved(feats_parser(), config, ["--feats_type", feats_type])
        try:
            check_feats_type(resolved)
        except ValueError as e:
            raise ValueError(f"{config} with --feats_type {feats_type}: {e}") from None
    for key in JOB_OPTIONS:
        resolved.pop(key, None)
    if feats_type == "cnn":
        resolved["media_type"] = media_type
    return resolved


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_pack."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionbin.caption_decode import get_parser as decode_parser
    from captionlib.packed import audio_sample_rates, pack_model
    from captionlib.utils.fileio import check_writable

    try:
        train_config = args.train_config or os.path.join(os.path.dirname(args.model_file), "config.yaml")
        check_writable(args.output, [args.model_file, train_config, args.feats_config, args.feats_stats,
                                     args.cider_df, args.train_wav_scp, args.decode_config, args.score_json])
        feats_config = _feats_config(args.feats_type, args.feats_config, args.media_type)
        decode_config = None
        if args.decode_config is not None or args.decode_args:
            decode_args = ["--feats_scp", "-", "--output_dir", "-"] + shlex.split(args.decode_args)
            decode_config = _resolved(decode_parser(), args.decode_config, decode_args, "--decode_config/--decode_args")
        rates = None
        if args.train_wav_scp is not None:
            rates = audio_sample_rates(args.train_wav_scp)
            logging.info("sample rates of %s: %s", args.train_wav_scp, rates)
        metrics = None
        if args.score_json is not None:
            try:
                metrics = json.loads(Path(args.score_json).read_text(encoding="utf-8"))
            except ValueError as e:
                raise ValueError(f"{args.score_json}: not JSON: {e}") from None
        pack_model(
            args.output, args.model_file, train_config, feats_config, args.feats_stats, args.cider_df, rates,
            decode_config, metrics,
            recipe=args.recipe or os.path.basename(os.getcwd()), trust_pickle=args.trust_pickle,
            encoder_sha256=args.encoder_sha256,
        )
    except (ValueError, OSError) as e:  # OSError: a missing file, a directory given as a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
