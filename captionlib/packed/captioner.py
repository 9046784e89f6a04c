"""Captioning with a packed model: :class:`PretrainedCaptioner` loads an archive
(:mod:`captionlib.packed.archive`) and captions files with exactly the code of the recipe's
stage 2 (:mod:`captionlib.packed.frontends`), then
:func:`captionlib.decode.inference.caption_batch` (stage 8), so a clip of the recipe gets the
caption of stage 8 (an example: :mod:`captionlib.packed`).
"""

import logging
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from captionlib.decode.options import check_decode_options
from captionlib.packed.archive import (
    CNN_MEMBER,
    DECODE_CONFIG,
    DECODE_DEFAULTS,
    ENCODER_MEMBER,
    FEATS_CONFIG,
    MODEL,
    PathLike,
    _packed_mapping,
    read_packed,
)
from captionlib.packed.frontends import AudioFrontEnd, VisualFrontEnd, _packed_encoder, find_cnn_weights
from captionlib.packed.output import CaptionResult
from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES

POOL_BATCHES = 8  # batches of features computed (and sorted by length) at a time


class PretrainedCaptioner:
    """A packed model ready to caption audio files (``feats_type: logmel`` or ``pretrained``) or image and video
    files (``feats_type: cnn``).

    Build it with :meth:`from_pretrained`. Features are computed as stage 2 computes them, by
    :class:`AudioFrontEnd` or :class:`VisualFrontEnd`.

    Attributes:
        model: the Captioner (eval mode, on ``device``); tokenizer: its token list.
        manifest: the archive's manifest; feats_config: the resolved feature config.
        decode_config: decoding options (:data:`DECODE_DEFAULTS` keys), packed or overridden.
        front_end: the :class:`AudioFrontEnd` or :class:`VisualFrontEnd`.
        media: ``"audio"``, ``"image"`` or ``"video"``: what the model captions.
        extensions: the file extensions looked for in directories (:func:`find_audio_files`).
        sample_rate: the rate in Hz audio is resampled to, or ``None`` (each file's own; and
            for image/video models).
    """

    def __init__(self, model, tokenizer, feats_config: Mapping[str, Any], manifest: Mapping[str, Any],
                 decode_config: Mapping[str, Any], device, name: str = "packed model",
                 members: Optional[Mapping[str, bytes]] = None, cnn_weights: Optional[PathLike] = None):
        """See :meth:`from_pretrained`; ``members``: the archive's (for ``cnn.pt2``),
        ``cnn_weights``: see :func:`find_cnn_weights`."""
        from captionlib.visual import TORCHVISION_NAMES

        self.model, self.tokenizer, self.device, self.name = model, tokenizer, device, name
        self.feats_config, self.manifest = dict(feats_config), dict(manifest)
        self.decode_config = {**DECODE_DEFAULTS, **decode_config}
        try:
            check_decode_options(**{k: self.decode_config[k] for k in DECODE_DEFAULTS})
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        feats_type = feats_config.get("feats_type", "logmel")
        if feats_type in ("logmel", "pretrained"):
            transform = None
            if feats_type == "pretrained":
                transform = _packed_encoder(feats_config, (members or {}).get(ENCODER_MEMBER), name)
            self.front_end: Any = AudioFrontEnd(feats_config, manifest.get("train_sample_rates") or {}, name,
                                                transform)
        elif feats_type == "cnn":
            weights = None
            if feats_config.get("cnn") in TORCHVISION_NAMES:
                weights = find_cnn_weights(feats_config, manifest, cnn_weights, name)
            self.front_end = VisualFrontEnd(feats_config, (members or {}).get(CNN_MEMBER), weights, name)
        else:
            raise ValueError(f"{name}: feats_type {feats_type!r}: packed models caption audio (logmel, pretrained) "
                             "or image and video files (cnn)")
        self.media, self.extensions = self.front_end.media, self.front_end.extensions
        self.sample_rate: Optional[int] = getattr(self.front_end, "sample_rate", None)

    @classmethod
    def from_pretrained(cls, path: PathLike, ngpu: int = 0, cnn_weights: Optional[PathLike] = None,
                        max_bytes: int = DEFAULT_MAX_MODEL_BYTES, **decode_options) -> "PretrainedCaptioner":
        """Load a packed model (written by :func:`pack_model`); nothing else is read (but the
        weights of a torchvision CNN, see :func:`find_cnn_weights`), and nothing in it is run:
        ``model.pth`` is read with ``torch.load(weights_only=True)``, ``cnn.pt2`` with
        ``torch.export.load`` once :func:`captionlib.visual.exported.check_exported_program`
        has found no route by which that would run code.

        Args:
            path: the zip archive.
            max_bytes: cap on the summed size of its members, in bytes (see :func:`read_packed`).
            ngpu: 0 = CPU, 1 = the first CUDA device (for the captioner; a CNN runs on the CPU).
            cnn_weights: the weights file of a torchvision CNN (default: looked for).
            decode_options: overrides of the packed decoding options (``beam_size``,
                ``batch_size``, ``max_len``, ``length_penalty``; ``rerank``, ``rerank_lm_weight`` and
                the sampling of its candidates, ``sample_temperature``, ``sample_top_k``,
                ``sample_top_p``: see :meth:`caption_files`); ``None`` values are ignored.

        Raises:
            FileNotFoundError: no such file; the weights of a torchvision CNN not found.
            ValueError: naming ``path``: see :func:`read_packed`; an unknown decoding option,
                or a beam size, batch size or maximum length below 1; an unknown feature type
                or a bad visual feature config (:class:`VisualFrontEnd`); torchvision weights
                with another SHA-256; a ``model.pth`` that needs unsafe (code-running) unpickling
                (:class:`~captionlib.utils.fileio.UnsafeFileError`: the archive was made by an older
                captionlib and must be converted, or was crafted).
            RuntimeError: ``ngpu`` > 0 without a CUDA device; a torchvision CNN without an
                importable torchvision.
        """
        from captionlib.models.captioner import load_model_file
        from captionlib.text.tokenizer import Tokenizer
        from captionlib.utils.distributed import get_device

        unknown = sorted(set(decode_options) - set(DECODE_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown decoding options {unknown}; expected some of {sorted(DECODE_DEFAULTS)}")
        check_decode_options(**decode_options)  # before anything is read
        manifest, members = read_packed(path, max_bytes)
        device = get_device(ngpu)
        model, obj = load_model_file(os.fspath(path), map_location=str(device), data=members[MODEL], member=MODEL)
        model.to(device)
        decode_config = _packed_mapping(path, members, DECODE_CONFIG) if DECODE_CONFIG in members else {}
        decode_config.update({k: v for k, v in decode_options.items() if v is not None})
        tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
        return cls(model, tokenizer, _packed_mapping(path, members, FEATS_CONFIG), manifest, decode_config, device,
                   name=str(path), members=members, cnn_weights=cnn_weights)

    def features(self, path: PathLike) -> np.ndarray:
        """Features of one file, as stage 2 dumps them: float32 ``(frames, dim)`` (see
        :class:`AudioFrontEnd`, :class:`VisualFrontEnd`).

        Raises:
            FileNotFoundError / ValueError: naming ``path``: missing, unreadable, empty or
                non-finite audio, an undecodable image or video.
        """
        return self.front_end(path)

    def caption_files(self, files: Sequence[PathLike], nbest: int = 0, skip_bad: bool = False,
                      progress: bool = False) -> List[CaptionResult]:
        """Caption files, batched by length (``decode_config['batch_size']`` files).

        Args:
            files: audio files (any format :func:`~captionlib.audio.io.load_audio` reads), or
                image or video files for an image or video model (see :class:`VisualFrontEnd`).
            nbest: N > 0 also gives the N best hypotheses of a beam of width
                ``max(beam_size, N)`` with their scores: the sum of the tokens' log-probs (eos
                included), divided by ``length ** length_penalty`` when that is non-zero,
                i.e. what the beam ranks by.
            skip_bad: a file that cannot be read gets a result with ``error`` set (and is
                logged) instead of raising.
            progress: show a tqdm progress bar (files).

        With ``decode_config['rerank']`` N > 0, each file's caption is the minimum-Bayes-risk
        choice among its beam/greedy caption and N samples (seeded by the file's path), by
        consensus CIDEr-D over all the files captioned together, as ``caption_decode --rerank``
        (:func:`captionlib.decode.rerank.mbr_select`).

        Returns:
            One :class:`CaptionResult` per file, in the order of ``files``.

        Raises:
            FileNotFoundError / ValueError: without ``skip_bad``, the first unreadable file
                (named); ``nbest`` < 0.
        """
        import torch
        from tqdm import tqdm

        from captionlib.data.datasets import pad_feats
        from captionlib.decode.inference import caption_batch, rerank_candidates
        from captionlib.decode.rerank import mbr_select

        check_decode_options(nbest=nbest)
        conf = self.decode_config
        rerank = int(conf["rerank"])
        sampling = (float(conf["sample_temperature"]), int(conf["sample_top_k"]), float(conf["sample_top_p"]))
        candidates, lm_scores = {}, {}  # with rerank: per file index, its candidates and their log-likelihoods
        results = [CaptionResult(file=os.fspath(f)) for f in files]
        pool = max(1, int(conf["batch_size"])) * POOL_BATCHES
        with tqdm(total=len(results), unit="file", disable=not progress) as bar:
            for start in range(0, len(results), pool):
                feats = {}
                for i in range(start, min(start + pool, len(results))):
                    try:
                        feats[i] = self.features(results[i].file)
                    except (ValueError, FileNotFoundError, OSError) as e:
                        if not skip_bad:
                            raise
                        results[i].error = str(e)
                        logging.error("skipped %s", e)
                        bar.update(1)
                order = sorted(feats, key=lambda i: feats[i].shape[0])
                for b in range(0, len(order), int(conf["batch_size"])):
                    idx = order[b: b + int(conf["batch_size"])]
                    x, lens = pad_feats([feats[i] for i in idx])
                    with torch.no_grad():
                        v, caps, nb, tokens = caption_batch(
                            self.model, self.tokenizer, x.to(self.device), lens.to(self.device),
                            int(conf["beam_size"]), int(conf["max_len"]), float(conf["length_penalty"]),
                            nbest, nbest_scores=True, return_tokens=True,
                        )
                        if rerank:
                            cands, lms = rerank_candidates(
                                self.model, self.tokenizer, v, tokens, caps, [results[i].file for i in idx], rerank,
                                int(conf["max_len"]), sampling, 0, float(conf["rerank_lm_weight"]))
                            for k, i in enumerate(idx):
                                candidates[i], lm_scores[i] = cands[k], lms[k] if lms else []
                    for k, i in enumerate(idx):
                        results[i].caption = caps[k]
                        results[i].nbest = nb[k] if nbest else []
                    bar.update(len(idx))
        if candidates:  # re-ranked: the consensus choice among each file's candidates, over all the files
            order = sorted(candidates)
            chosen, _ = mbr_select([candidates[i] for i in order], [lm_scores[i] for i in order] or None,
                                   float(conf["rerank_lm_weight"]))
            for i, k in zip(order, chosen):
                results[i].caption = candidates[i][k]
        return results

    def caption(self, files: Sequence[PathLike]) -> List[str]:
        """Caption files (audio, images or videos, as the model): one caption per file, in order.

        Raises:
            FileNotFoundError / ValueError: the first file that cannot be read (named).
        """
        return [r.caption for r in self.caption_files(files)]

    def caption_nbest(self, files: Sequence[PathLike], nbest: int) -> List[List[Tuple[str, float]]]:
        """The ``nbest`` best hypotheses per file as ``(caption, score)``, best first (see
        :meth:`caption_files`).

        Raises:
            FileNotFoundError / ValueError: the first file that cannot be read (named);
                ``nbest`` < 1.
        """
        if nbest < 1:
            raise ValueError(f"nbest must be >= 1, got {nbest}")
        return [r.nbest for r in self.caption_files(files, nbest=nbest)]
