#!/usr/bin/env python3
"""Score decoded captions as the COCO/DCASE evaluations do (recipe scoring stage).

References (``<ref_dir>/text`` grouped by ``utt2spk`` or ``spk2utt``) and hypotheses
(``<clip-id> <caption>``) are tokenized with pycocoevalcap's PTB tokenizer and scored with
BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE and SPIDEr. Writes ``score.json`` (keys
BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE, SPIDEr: a float or null, plus
``skipped: {metric: reason}``) and ``result.txt`` beside it. SPICE needs the Stanford
CoreNLP 3.6.0 jars (``--spice_lib_dir`` or ``$CAPTIONLIB_SPICE_LIB``; see
``tools/install_spice.sh``); without them SPICE and SPIDEr are reported as skipped.

Diversity next to precision (seed 001, table 4): ``--hyp_samples`` (the ``text_samples`` of
``caption_decode --num_diversity_samples N``: ids ``<clip-id>#<k>``) adds ``Div-1``, ``Div-2``
and ``mBLEU-4`` over each clip's N samples, averaged over clips, and ``CIDEr-D (samples)``:
the mean over clips of the mean CIDEr-D of each clip's samples (each sample scored against
the clip's references with the document frequencies of the scored references, as
``CIDEr-D``). ``--hyp_nbest`` (the ``text_nbest`` of ``caption_decode --nbest N``) adds
``Div-1 (beams)``, ``Div-2 (beams)`` and ``mBLEU-4 (beams)`` over each clip's N best beam
hypotheses. Without them those keys are null with a reason in ``skipped``. ``Vocab``
(distinct words of the 1-best hypotheses) is always written.

Fluency (``--metrics ...,fluency``; see :mod:`captionlib.metrics.fluency_score`): ``FER (rules)``
and ``FER (detector)``, the fractions of the hypotheses flagged by the rules and by the detector
of ``--fluency_model`` (trained by ``caption_train_fluency``; without one it is null and the
output says the rules alone were used), and ``CIDEr-D-FL`` / ``SPIDEr-FL``: the per-clip CIDEr-D /
SPIDEr times 0.1 where the caption is flagged, averaged (SPIDEr-FL as in DCASE 2023; it needs
SPICE). These keys are written only when ``fluency`` is requested.

Usage:
    python -m captionbin.caption_score --ref_dir data/evaluation \\
        --hyp exp/xe/decode_greedy/evaluation/text \\
        --metrics bleu,meteor,rouge_l,cider_d,spice,spider \\
        --output exp/xe/decode_greedy/evaluation/score.json [--spice_lib_dir tools/spice_lib] \\
        [--hyp_samples exp/xe/decode_greedy/evaluation/text_samples] \\
        [--hyp_nbest exp/xe/decode_greedy/evaluation/text_nbest]
    python -m captionbin.caption_score --ref_dir data/evaluation --hyp exp/rl/decode/evaluation/text \
        --metrics cider_d,spider,fluency --fluency_model exp/fluency/detector.pth \
        --output exp/rl/decode/evaluation/score.json
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str_or_none

REQUIRED = ("ref_dir", "hyp", "output")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Caption scoring: BLEU, METEOR, ROUGE-L, CIDEr-D, SPICE, SPIDEr; Div-1, Div-2, mBLEU-4")
    parser.add_argument("--ref_dir", default=None, help="(required) data dir with text + utt2spk/spk2utt")
    parser.add_argument("--hyp", default=None, help="(required) decoded text: <clip-id> <caption>")
    parser.add_argument("--output", default=None, help="(required) score.json path")
    parser.add_argument("--hyp_samples", type=str_or_none, default=None,
                        help="sampled captions <clip-id>#<k> <caption> (caption_decode "
                             "--num_diversity_samples) for CIDEr-D (samples), Div-1, Div-2, mBLEU-4")
    parser.add_argument("--hyp_nbest", type=str_or_none, default=None,
                        help="N-best beam hypotheses <clip-id>#<rank> <caption> (caption_decode --nbest) "
                             "for Div-1 (beams), Div-2 (beams), mBLEU-4 (beams)")
    parser.add_argument("--metrics", default="bleu,meteor,rouge_l,cider_d,spice,spider",
                        help="comma-separated: bleu, bleu_1..bleu_4, meteor, rouge_l, cider_d, spice, spider, "
                             "fluency (FER and CIDEr-D-FL, SPIDEr-FL)")
    parser.add_argument("--fluency_model", type=str_or_none, default=None,
                        help="fluency detector of caption_train_fluency (e.g. exp/fluency/detector.pth) for "
                             "--metrics fluency; none: the rules alone flag captions")
    parser.add_argument("--spice_lib_dir", type=str_or_none, default=None,
                        help="dir with stanford-corenlp-3.6.0.jar and -models.jar (else $CAPTIONLIB_SPICE_LIB)")
    parser.add_argument("--spice_cache_dir", type=str_or_none, default=None,
                        help="SPICE parse cache (default: <dir of --output>/spice_cache)")
    parser.add_argument("--spice_heap", default="8G", help="JVM heap for SPICE (-Xmx)")
    parser.add_argument("--spice_timeout", type=float, default=3600.0, help="seconds before SPICE is killed")
    parser.add_argument("--spice_threads", type=int, default=None, help="SPICE threads (default: all cores)")
    parser.add_argument("--rhino_jar", type=str_or_none, default=None,
                        help="Rhino jar for Java >= 15 (default: $CAPTIONLIB_RHINO_JAR or /usr/share/java/rhino.jar)")
    parser.add_argument("--java", default="java", help="java executable")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.metrics.scorer.score_caption_files`."""
    parser = get_parser()
    args = parse_args(parser, cmd)
    missing = [f"--{k}" for k in REQUIRED if getattr(args, k) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    from captionlib.metrics.scorer import SpiceOptions, score_caption_files

    spice = SpiceOptions(lib_dir=args.spice_lib_dir, cache_dir=args.spice_cache_dir, heap=args.spice_heap,
                         timeout=args.spice_timeout, threads=args.spice_threads, rhino_jar=args.rhino_jar)
    try:
        score_caption_files(
            ref_dir=args.ref_dir, hyp=args.hyp, output=args.output, metrics=args.metrics,
            hyp_samples=args.hyp_samples, hyp_nbest=args.hyp_nbest, spice=spice, java=args.java,
            fluency_model=args.fluency_model,
        )
    except (ValueError, OSError) as e:  # OSError: a missing file, a directory given as a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
