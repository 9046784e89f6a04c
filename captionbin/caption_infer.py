#!/usr/bin/env python3
"""Caption audio, image or video files (or directories of them) with a packed model
(``caption_pack``, stage 10).

The packed feature config says what the model captions, and its features are computed by the
code of the recipe's feature dump, so a clip of the recipe gets the caption of stage 8 (same
decoding options):

* audio models (``feats_type logmel``, or ``pretrained``: the log-mel then the frozen encoder
  packed with the model): WAV, FLAC, OGG and MP3 (soundfile; formats it cannot
  open through PyAV/FFmpeg) at any sample rate, mono or stereo: audio is down-mixed and
  resampled as the model's feature config says;
* image models (``feats_type cnn``, ``media_type image``): any image Pillow reads (a GIF gives
  its first frame); a video file is refused;
* video models (``media_type video``): any video FFmpeg reads, and animated GIFs (decoded as
  stage 2 decodes them, :mod:`captionlib.visual.media`), the packed number of frames sampled
  uniformly in time (a still image is a one-frame video).

The CNN of an image/video model comes from the archive (``random_convnet``: its seed;
``exported``: the packed ``.pt2``); the weights of a torchvision CNN are not packed: they are
looked for where they were packed from and in torchvision's cache
(``$TORCH_HOME/hub/checkpoints``), or given with ``--cnn_weights``; they must be the packed file
(SHA-256), and torchvision must be installed.

Directories are searched recursively for the files the model captions (audio:
``.wav``/``.flac``/``.ogg``/``.mp3``/``.m4a``; image and video models: their extensions, see
:data:`captionlib.packed.frontends.IMAGE_EXTENSIONS` / ``VIDEO_EXTENSIONS``), sorted. Decoding options
default to those packed with the model (the recipe's decode config); the options below override
them.

Output (``--output``, default stdout): TSV with a header, ``file<TAB>caption`` per file (plus
``caption_k<TAB>score_k`` columns with ``--nbest N``), or JSON (``--format json`` or an output
ending in ``.json``): a list of ``{"file", "caption"[, "nbest"]}``. A file that cannot be read
(missing, unreadable, empty) is reported by name and left out; the exit status is then 1,
unless ``--skip_bad true``.

Usage:
    python -m captionbin.caption_infer --model exp/xe_x/packed/valid.cider_d.best.zip \\
        --output captions.tsv my_recordings/ street.mp3
    python -m captionbin.caption_infer --model packed.zip --beam_size 3 --nbest 3 \\
        --output captions.json a.wav b.flac
    python -m captionbin.caption_infer --model exp/xe_y/packed/valid.cider_d.best.zip \\
        image.jpg video.mp4 anim.gif   # a video model; an image model: images only
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.decode.options import check_decode_options
from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES
from captionlib.utils.cli import get_base_parser, parse_args, str2bool, str_or_none

PROGRESS_MIN_FILES = 20  # a progress bar for longer lists


def get_parser():
    """Return the argument parser of caption_infer."""
    parser = get_base_parser("Caption audio, image or video files with a packed model")
    parser.add_argument("inputs", nargs="*",
                        help="files or directories (searched recursively for the files the model captions)")
    parser.add_argument("--model", default=None, help="(required) packed model (.zip) written by caption_pack")
    parser.add_argument("--output", default="-", help="output file; '-': stdout")
    parser.add_argument("--format", default=None, choices=("tsv", "json"),
                        help="output format (default: json for an --output ending in .json, else tsv)")
    parser.add_argument("--beam_size", type=int, default=None, help="1 = greedy (default: the packed decode config)")
    parser.add_argument("--max_len", type=int, default=None, help="max tokens, eos included (default: packed)")
    parser.add_argument("--length_penalty", type=float, default=None, help="beam: score / length**p (default: packed)")
    parser.add_argument("--batch_size", type=int, default=None, help="files per batch (default: packed)")
    parser.add_argument("--rerank", type=int, default=None,
                        help="N > 0: the minimum-Bayes-risk caption (consensus CIDEr-D) among the beam/greedy one and "
                             "N samples per file (default: packed; 0: off)")
    parser.add_argument("--rerank_lm_weight", type=float, default=None,
                        help="--rerank: weight of a candidate's length-normalised log-likelihood (default: packed)")
    parser.add_argument("--sample_temperature", type=float, default=None, help="--rerank samples' temperature "
                                                                                "(default: packed)")
    parser.add_argument("--sample_top_k", type=int, default=None, help="--rerank samples: top-k (0: off; default: "
                                                                        "packed)")
    parser.add_argument("--sample_top_p", type=float, default=None, help="--rerank samples: nucleus p (1: off; "
                                                                          "default: packed)")
    parser.add_argument("--nbest", type=int, default=0,
                        help="N > 0: also write the N best hypotheses of a beam of width max(beam_size, N) "
                             "with their scores (sum of log-probs, what the beam ranks by)")
    parser.add_argument("--ngpu", type=int, default=0,
                        help="0: CPU; 1: the first CUDA device (the captioner; a CNN runs on the CPU, as stage 2)")
    parser.add_argument("--cnn_weights", type=str_or_none, default=None,
                        help="weights file of the torchvision CNN of an image/video model (default: where it "
                             "was packed from, else torchvision's cache $TORCH_HOME/hub/checkpoints); must be "
                             "the packed file (SHA-256)")
    parser.add_argument("--max_model_bytes", type=int, default=DEFAULT_MAX_MODEL_BYTES,
                        help="cap on the summed size of the packed model's members, in bytes (4 GiB), checked "
                             "before any member is read")
    parser.add_argument("--num_threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    parser.add_argument("--skip_bad", type=str2bool, default=False,
                        help="exit 0 even if some files could not be read (they are still reported and left out)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_infer."""
    parser = get_parser()
    args = parse_args(parser, cmd, ("model",))
    if not args.inputs:
        parser.error("no input files or directories given")
    if args.max_model_bytes < 1:
        parser.error(f"--max_model_bytes must be >= 1, got {args.max_model_bytes}")
    for opt in ("ngpu", "num_threads"):
        if getattr(args, opt) < 0:
            parser.error(f"--{opt} must be >= 0, got {getattr(args, opt)}")
    try:
        check_decode_options(args.beam_size, args.batch_size, args.max_len, args.length_penalty, args.nbest,
                             sample_temperature=args.sample_temperature, sample_top_k=args.sample_top_k,
                             sample_top_p=args.sample_top_p, rerank=args.rerank, rerank_lm_weight=args.rerank_lm_weight)
    except ValueError as e:
        parser.error(f"--{e}")
    import torch

    from captionlib.packed import PretrainedCaptioner, find_audio_files, format_results
    from captionlib.utils.fileio import atomic_write_text, check_writable

    if args.output != "-":
        try:
            check_writable(args.output, [args.model, *args.inputs])  # before the captioning, not after it
        except ValueError as e:
            parser.error(f"--output {e}")
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    fmt = args.format or ("json" if args.output.lower().endswith(".json") else "tsv")
    try:
        captioner = PretrainedCaptioner.from_pretrained(
            args.model, ngpu=args.ngpu, cnn_weights=args.cnn_weights, max_bytes=args.max_model_bytes,
            beam_size=args.beam_size, max_len=args.max_len, length_penalty=args.length_penalty,
            batch_size=args.batch_size, rerank=args.rerank, rerank_lm_weight=args.rerank_lm_weight,
            sample_temperature=args.sample_temperature, sample_top_k=args.sample_top_k, sample_top_p=args.sample_top_p,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # RuntimeError: --ngpu without a GPU, no torchvision
        logging.error("%s", e)
        sys.exit(1)
    files = find_audio_files(args.inputs, tuple("." + e for e in captioner.extensions))
    if not files:
        logging.error("no %s files in %s", captioner.media, " ".join(args.inputs))
        sys.exit(1)
    logging.info("captioning %d files with %s (%s)", len(files), args.model,
                 ", ".join(f"{k} {v}" for k, v in captioner.decode_config.items()))
    results = captioner.caption_files(files, nbest=args.nbest, skip_bad=True,
                                      progress=len(files) > PROGRESS_MIN_FILES)
    text = format_results(results, fmt, args.nbest)
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        try:
            atomic_write_text(args.output, text)
        except OSError as e:  # the captions are not lost: they go to stdout
            sys.stdout.write(text)
            sys.stdout.flush()
            logging.error("could not write %s (%s): the captions are on stdout", args.output, e)
            sys.exit(1)
    bad = [r.file for r in results if r.error is not None]
    logging.info("captioned %d of %d files%s", len(results) - len(bad), len(results),
                 f" into {args.output}" if args.output != "-" else "")
    if bad:
        logging.error("skipped %d unreadable file(s): %s", len(bad), ", ".join(bad))
        if not args.skip_bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
