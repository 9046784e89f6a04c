#!/usr/bin/env python3
"""Train the fluency error detector of ``caption_score --metrics fluency`` (FENSE's, made small).

Trains :class:`captionlib.metrics.fluency.FluencyDetector` (a small convolutional network over words, part-of-speech
features and word-pair counts; nothing downloaded) on clean
captions and their synthetic errors (FENSE, Zhou et al., ICASSP 2022: add_tail, repeat_event,
repeat_adv, remove_conj, remove_verb; :mod:`captionlib.metrics.fluency_corrupt`), sets its
threshold on held-out training captions, then measures it on the ``--heldout`` captions: the
fraction of their clean forms it flags and, for each error class, the fraction of their damaged
forms it flags (recall), next to the same rates of the rules; with ``--judgements``, the same
rates on the captions a person judged (recall on the damaged ones judged disfluent, flags on the
clean ones judged fluent). Writes the model (``--output``,
default ``exp/fluency/detector.pth``), ``metrics.json`` (that measurement, the options, the
training time) and ``metrics.md`` (the table) beside it.

Caption files: Clotho captions CSVs (``*.csv``, ``file_name,caption_1..caption_5``) or Kaldi
``text`` files (``<utt-id> <caption>``, e.g. a recipe's ``data/development/text``).
About 7 minutes with the defaults on one CPU thread; docs/fluency.md has the measured recall and
false-positive rates.

Usage:
    OMP_NUM_THREADS=2 python -m captionbin.caption_train_fluency \\
        --captions clotho/clotho_captions_development.csv [data/audiocaps_train/text] \\
        --heldout clotho/clotho_captions_validation.csv --output exp/fluency/detector.pth
"""

import json
import logging
import os
import sys
import time
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str_or_none

REQUIRED = ("captions",)
DEFAULT_OUTPUT = "exp/fluency/detector.pth"


def get_parser():
    """Build the argument parser (the training options mirror ``FluencyTrainOptions``)."""
    parser = get_base_parser("Train the fluency error detector (FENSE's synthetic errors) and measure it")
    parser.add_argument("--captions", nargs="+", default=None,
                        help="(required) training caption files: Clotho *.csv and/or Kaldi text files")
    parser.add_argument("--heldout", nargs="*", default=[], help="held-out caption files measured after training "
                        "(e.g. clotho_captions_validation.csv); none: no measurement")
    parser.add_argument("--judgements", type=str_or_none, default=None,
                        help="a person's fluent/disfluent judgements of --heldout captions, clean and damaged "
                        "(docs/fluency_judgements.tsv): also measure on the judged-disfluent damaged ones and the "
                        "judged-fluent clean ones")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="model file; metrics.json and metrics.md beside it")
    parser.add_argument("--max_captions", type=int, default=None,
                        help="train on the first N captions only (quick runs, tests)")
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (cosine decay)")
    parser.add_argument("--embed_dim", type=int, default=64, help="word embedding size")
    parser.add_argument("--channels", type=int, default=128, help="convolution channels")
    parser.add_argument("--layers", type=int, default=3,
                        help="dilated convolution layers (receptive field 2^(L+1)-1 words)")
    parser.add_argument("--min_count", type=int, default=2, help="rarer training words are <unk>")
    parser.add_argument("--unk_rate", type=float, default=0.02, help="training words replaced by <unk>")
    parser.add_argument("--second_error", type=float, default=0.3, help="chance of a second error in a damaged copy")
    parser.add_argument("--class_weights", type=float, nargs=5, default=[1.0, 1.0, 1.0, 2.0, 2.0],
                        help="relative frequency of add_tail, repeat_event, repeat_adv, remove_conj, remove_verb")
    parser.add_argument("--tune_fraction", type=float, default=0.05,
                        help="fraction of the training captions held out to set the threshold")
    parser.add_argument("--target_fpr", type=float, default=0.03,
                        help="fraction of those clean captions the threshold may flag")
    parser.add_argument("--tag_weight", type=float, default=0.3, help="weight of the auxiliary POS-tag loss")
    parser.add_argument("--count_folds", type=int, default=4,
                        help="a training caption's bigram counts exclude its fold (cross-fitting)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log_interval", type=int, default=100, help="updates between progress lines")
    parser.add_argument("--threads", type=str_or_none, default=None,
                        help="torch CPU threads (default: torch's, i.e. OMP_NUM_THREADS)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.metrics.fluency_train.train_detector`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    import torch

    from captionlib.metrics.fluency_train import (
        FluencyTrainOptions,
        evaluate_detector,
        evaluate_judged,
        format_evaluation,
        format_judged,
        read_caption_file,
        read_judgements,
        train_detector,
    )
    from captionlib.utils.fileio import atomic_write_text, check_writable

    if args.threads is not None:
        torch.set_num_threads(int(args.threads))
    names = [f.name for f in FluencyTrainOptions.__dataclass_fields__.values()]
    opts = FluencyTrainOptions(**{k: getattr(args, k) for k in names})
    opts.class_weights = tuple(opts.class_weights)
    try:
        check_writable(args.output)
        judgements = read_judgements(args.judgements) if args.judgements else None
        clotho_heldout = [h for h in args.heldout if h.endswith(".csv")]
        if judgements is not None and not clotho_heldout:
            raise ValueError("--judgements needs the Clotho captions CSV of the judged clips in --heldout")
        captions = [c for path in args.captions for c in read_caption_file(path)]
        heldout = [c for path in args.heldout for c in read_caption_file(path)]
        if args.max_captions is not None:
            captions = captions[:args.max_captions]
        t0 = time.time()
        detector = train_detector(captions, opts)
        train_s = time.time() - t0
        ev = evaluate_detector(detector, heldout, seed=args.seed) if heldout else None
        judged = None if judgements is None else evaluate_judged(
            detector, judgements, clotho_heldout, seed=args.seed)
        detector.meta.update({"train_seconds": round(train_s, 1), "captions": list(args.captions),
                              "heldout": list(args.heldout), "heldout_measurement": ev,
                              "judgements": args.judgements, "judged_measurement": judged})
        detector.save(args.output)
        out_dir = os.path.dirname(os.path.abspath(args.output))
        metrics = {"threshold": detector.threshold, "train_seconds": round(train_s, 1),
                   "threads": torch.get_num_threads(), **detector.meta}
        atomic_write_text(os.path.join(out_dir, "metrics.json"), json.dumps(metrics, indent=2) + "\n")
        logging.info("wrote %s (threshold %.4f) after %.0f s of training", args.output, detector.threshold, train_s)
        if ev is not None:
            table = format_evaluation(ev)
            if judged is not None:
                table += f"\n\nJudged ({args.judgements}):\n\n{format_judged(judged)}"
            atomic_write_text(os.path.join(out_dir, "metrics.md"), f"Held out: {' '.join(args.heldout)}\n\n{table}\n")
            for line in table.splitlines():
                logging.info("%s", line)
    except (ValueError, OSError, ImportError) as e:  # OSError: a missing file; ImportError: no POS tagger
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
