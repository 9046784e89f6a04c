"""Test helpers: a miniature recipe directory with a randomly initialised model, and packing it.

The model is a tiny Captioner (untrained) whose normalisation statistics are those of the
real clips' features, so its captions depend on the audio.
"""

import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import yaml

from captionlib.audio.features import LogMel
from captionlib.audio.io import load_audio
from captionlib.metrics.cider_d import DocumentFrequency
from captionlib.models.captioner import Captioner, model_file_dict

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "data" / "clotho_fixture"
# real 2-s clips at 44.1 kHz, mono
CLIPS = sorted(FIXTURE.glob("*/*.wav"))
WORDS = ["a", "dog", "barks", "birds", "chirp", "car", "passes", "rain", "falls", "people", "talk"]
TOKENS = ["<blank>", "<unk>"] + WORDS + ["<sos/eos>"]
CONF = {"vocab_size": len(TOKENS), "encoder_conf": {"rnn_units": 8}, "decoder_conf": {"hidden_size": 16}}
FEATS_CONFIG = {"feats_type": "logmel", "n_mels": 64, "n_fft": 2048, "win_length_s": 0.04,
                "hop_length_s": 0.02, "fs": None}
DECODE_CONFIG = {"beam_size": 2, "batch_size": 2, "max_len": 8}
TRAIN_ENV = {"captionlib": "0.1.0", "git_revision": "unknown", "git_modified": None, "python": "3.12.3",
             "torch": "2.13.0+cpu", "cuda": None, "device": "cpu", "threads": 1}


def make_recipe(root: Path, seed: int = 0, feats_config: dict = FEATS_CONFIG) -> dict:
    """Write a miniature recipe dir under ``root``: model file, config.yaml, env.yaml in exp/xe_x, the
    stats files, conf/{feats_logmel,decode}.yaml, data/train/wav.scp (the fixture clips) and
    a score.json. Returns their paths as strings."""
    root.mkdir(parents=True, exist_ok=True)
    extractor = LogMel()
    feats = np.concatenate([extractor(*load_audio(p)) for p in CLIPS])
    mean, std = feats.mean(0), feats.std(0)
    torch.manual_seed(seed)
    model = Captioner(**CONF)
    model.set_normalization(mean, std)
    exp = root / "exp" / "xe_x"
    exp.mkdir(parents=True)
    torch.save(model_file_dict(model, CONF, TOKENS, epoch=1), exp / "valid.cider_d.best.pth")
    (exp / "config.yaml").write_text(yaml.safe_dump({"max_epoch": 1, "model_conf": CONF}))
    (exp / "env.yaml").write_text(yaml.safe_dump(TRAIN_ENV))
    stats = root / "exp" / "stats_logmel"
    stats.mkdir(parents=True)
    np.savez(stats / "feats_stats.npz", mean=mean, std=std, count=np.array(len(feats)))
    DocumentFrequency.from_references({"a": [["a", "dog", "barks"]], "b": [["rain", "falls"]]}).save(
        str(stats / "cider_df.npz"))
    conf = root / "conf"
    conf.mkdir()
    (conf / "feats_logmel.yaml").write_text(yaml.safe_dump(feats_config))
    (conf / "decode.yaml").write_text(yaml.safe_dump(DECODE_CONFIG))
    data = root / "data" / "train"
    data.mkdir(parents=True)
    (data / "wav.scp").write_text("".join(f"clip-{i} {p}\n" for i, p in enumerate(CLIPS)))
    score = exp / "decode_x" / "evaluation" / "score.json"
    score.parent.mkdir(parents=True)
    score.write_text(json.dumps({"CIDEr-D": 0.123, "BLEU-4": 0.05}))
    return {
        "root": str(root), "model_file": str(exp / "valid.cider_d.best.pth"), "train_config": str(exp / "config.yaml"),
        "feats_stats": str(stats / "feats_stats.npz"), "cider_df": str(stats / "cider_df.npz"),
        "feats_config": str(conf / "feats_logmel.yaml"), "decode_config": str(conf / "decode.yaml"),
        "wav_scp": str(data / "wav.scp"), "score_json": str(score),
    }


def pack_args(recipe: dict, output: Path, *extra: str) -> list:
    """The caption_pack command line packing ``recipe`` (from :func:`make_recipe`) into ``output``."""
    return ["--model_file", recipe["model_file"], "--feats_config", recipe["feats_config"],
            "--feats_stats", recipe["feats_stats"], "--cider_df", recipe["cider_df"],
            "--train_wav_scp", recipe["wav_scp"], "--decode_config", recipe["decode_config"],
            "--score_json", recipe["score_json"], "--recipe", "mini_test", "--output", str(output), *extra]


def make_packed(tmp_path: Path, name: str = "packed.zip", feats_config: dict = FEATS_CONFIG) -> Path:
    """Pack a fresh miniature recipe with ``caption_pack``, move the archive to
    ``tmp_path/name`` and delete the recipe dir (the archive must stand alone)."""
    import shutil

    from captionbin.caption_pack import main

    recipe = make_recipe(tmp_path / "recipe", feats_config=feats_config)
    out = tmp_path / name
    main(pack_args(recipe, tmp_path / "recipe" / "exp" / "xe_x" / "packed.zip"))
    shutil.move(str(tmp_path / "recipe" / "exp" / "xe_x" / "packed.zip"), out)
    shutil.rmtree(tmp_path / "recipe")
    return out


def write_variant(path: Path, wave: np.ndarray, sr: int, target_sr: int, channels: int, **kw) -> Path:
    """Write real audio resampled to ``target_sr`` with ``channels`` channels (the second one
    at half amplitude) with soundfile (format from the extension)."""
    import soxr

    x = soxr.resample(wave, sr, target_sr, quality="HQ").astype(np.float32) if sr != target_sr else wave
    data = np.stack([x, 0.5 * x], axis=1) if channels == 2 else x
    sf.write(path, data, target_sr, **kw)
    return path


def write_with_pyav(path: Path, wave: np.ndarray, sr: int, codec: str, out_rate: int, layout: str = "stereo") -> Path:
    """Encode a mono float32 wave at ``sr`` Hz (duplicated for ``layout="stereo"``) with
    PyAV/FFmpeg's ``codec`` at ``out_rate`` Hz (e.g. AAC in .m4a, which libsndfile cannot open)."""
    import av

    data = np.ascontiguousarray(np.stack([wave, wave]) if layout == "stereo" else wave[None], dtype=np.float32)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=out_rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(data, format="fltp", layout=layout)
        frame.sample_rate = sr
        resampler = av.AudioResampler(format=stream.format.name, layout=layout, rate=out_rate)
        for f in resampler.resample(frame) + resampler.resample(None):
            for packet in stream.encode(f):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


# ------------------------------------------------------------------ image and video models
EGS = Path(__file__).resolve().parents[1] / "egs"
IMAGES = sorted((EGS / "mini_mscoco" / "coco_fixture" / "images").glob("*/*.jpg"))  # real photos
VIDEOS = sorted((EGS / "mini_msvd" / "msvd_fixture" / "YouTubeClips").glob("*.avi"))  # short real-photo videos
# the CI stand-in CNN of the mini recipes (64 channels); grid for images, 4 pooled frames for videos
CNN_CONFIGS = {
    "image": {"cnn": "random_convnet", "seed": 0, "output": "grid", "image_size": 64, "batch_size": 8},
    "video": {"cnn": "random_convnet", "seed": 0, "output": "pooled", "image_size": 64, "num_frames": 4,
              "batch_size": 3},
}
VISUAL_CONF = {"vocab_size": len(TOKENS), "feats_dim": 64, "encoder": "rnn",
               "encoder_conf": {"proj_size": 8, "hidden_size": 8}, "decoder": "lstm",
               "decoder_conf": {"hidden_size": 16}}


def make_visual_recipe(root: Path, media_type: str, feats_config: dict = None, feats_dim: int = 64) -> dict:
    """Like :func:`make_recipe` for an image or video model: conf/feats_cnn.yaml (default
    :data:`CNN_CONFIGS`), a tiny untrained Captioner taking ``feats_dim``-d features normalised
    by the statistics of the fixture media's features (computed with
    :class:`captionlib.packed.frontends.VisualFrontEnd`), data/train/<media_type>.scp."""
    from captionbin.caption_extract_visual_feats import get_parser
    from captionlib.packed import VisualFrontEnd

    feats_config = dict(CNN_CONFIGS[media_type] if feats_config is None else feats_config)
    recipe = make_recipe(root)  # the audio recipe's files, replaced where the front end differs
    media = IMAGES if media_type == "image" else VIDEOS
    conf_file = root / "conf" / "feats_cnn.yaml"
    conf_file.write_text(yaml.safe_dump(feats_config))
    resolved = vars(get_parser().parse_args(["--config", str(conf_file), "--media_type", media_type]))
    mean, std = np.zeros(feats_dim, np.float32), np.ones(feats_dim, np.float32)
    if resolved["cnn"] in ("random_convnet", "exported"):  # not torchvision: not importable here
        exported = Path(resolved["cnn_weights"]).read_bytes() if resolved["cnn"] == "exported" else None
        front = VisualFrontEnd(resolved, exported=exported)
        feats = np.concatenate([front(p) for p in media])
        if feats.shape[1] == feats_dim:  # else a model that does not fit the CNN (a test of that error)
            mean, std = feats.mean(0), feats.std(0)
    torch.manual_seed(0)
    conf = dict(VISUAL_CONF, feats_dim=feats_dim)
    model = Captioner(**conf)
    model.set_normalization(mean, std)
    torch.save(model_file_dict(model, conf, TOKENS, epoch=1), recipe["model_file"])
    Path(recipe["train_config"]).write_text(yaml.safe_dump({"max_epoch": 1, "model_conf": conf}))
    np.savez(recipe["feats_stats"], mean=mean, std=std, count=np.array(len(mean)))
    scp = root / "data" / "train" / f"{media_type}.scp"
    scp.write_text("".join(f"clip-{i} {p}\n" for i, p in enumerate(media)))
    return dict(recipe, feats_config=str(conf_file), media_scp=str(scp), media_type=media_type)


def visual_pack_args(recipe: dict, output: Path, *extra: str) -> list:
    """The caption_pack command line packing a :func:`make_visual_recipe` into ``output``."""
    args = pack_args(recipe, output, "--feats_type", "cnn", "--media_type", recipe["media_type"], *extra)
    i = args.index("--train_wav_scp")
    return args[:i] + args[i + 2:]
