"""caption_infer: audio at 8-48 kHz, mono/stereo, FLAC/OGG/MP3 and (PyAV) M4A, a directory,
bad files and --skip_bad exit codes, TSV and JSON output; image and video models (images, videos,
GIFs) computing stage 2's CNN features, an exported CNN packed in the archive."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from captionbin.caption_infer import get_parser, main
from captionlib.audio.io import load_audio
from captionlib.packed import CNN_MEMBER, PretrainedCaptioner, read_packed
from packed_models import (
    CLIPS,
    IMAGES,
    VIDEOS,
    make_packed,
    make_visual_recipe,
    visual_pack_args,
    write_variant,
    write_with_pyav,
)

RATES = [8000, 16000, 22050, 44100, 48000]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A packed model and a directory of the real clips in many formats."""
    tmp = tmp_path_factory.mktemp("infer")
    packed = make_packed(tmp)
    audio = tmp / "audio"
    (audio / "sub").mkdir(parents=True)
    wave, sr = load_audio(CLIPS[0])
    files = []
    for k, rate in enumerate(RATES):
        ext, channels = (".flac", 1) if k % 2 == 0 else (".ogg", 2)
        files.append(write_variant(audio / f"r{rate}{ext}", wave, sr, rate, channels))
        files.append(write_variant(audio / "sub" / f"r{rate}_st{ext}", wave, sr, rate, 3 - channels))
    files.append(write_variant(audio / "c.wav", *load_audio(CLIPS[1]), 44100, 2, subtype="PCM_16"))
    (audio / "notes.txt").write_text("not audio, not listed")
    return tmp, packed, audio, sorted(str(f) for f in files)


def _tsv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    return rows[0], rows[1:]


def test_get_parser_and_usage(setup):
    assert get_parser() is not None
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):
        main(["--model", str(setup[1])])  # no inputs


def test_directory_tsv_and_json(setup):
    tmp, packed, audio, files = setup
    main(["--model", str(packed), "--output", str(tmp / "out.tsv"), str(audio)])
    header, rows = _tsv(tmp / "out.tsv")
    assert header == ["file", "caption"]
    assert [r[0] for r in rows] == files  # recursive, sorted, only audio extensions
    expected = PretrainedCaptioner.from_pretrained(packed).caption(files)
    assert [r[1] for r in rows] == expected

    main(["--model", str(packed), "--output", str(tmp / "out.json"), "--nbest", "2", "--beam_size", "3", *files[:3]])
    got = json.loads((tmp / "out.json").read_text())
    assert [g["file"] for g in got] == files[:3]
    for g in got:
        assert len(g["nbest"]) == 2 and g["nbest"][0]["score"] >= g["nbest"][1]["score"]
        assert g["nbest"][0]["caption"] == g["caption"]  # beam 3 >= nbest 2: its best is the caption

    main(["--model", str(packed), "--output", str(tmp / "nb.txt"), "--format", "tsv", "--nbest", "2", files[0]])
    header, rows = _tsv(tmp / "nb.txt")
    assert header == ["file", "caption", "caption_1", "score_1", "caption_2", "score_2"]
    assert len(rows) == 1 and float(rows[0][3]) >= float(rows[0][5])


def test_pyav_formats(setup, tmp_path):
    """An M4A (AAC) that soundfile cannot open is decoded by PyAV."""
    pytest.importorskip("av")
    tmp, packed, audio, files = setup
    wave, sr = load_audio(CLIPS[0])
    path = write_with_pyav(tmp_path / "clip.m4a", wave, sr, "aac", 48000, layout="mono")
    with pytest.raises(Exception):  # noqa: B017 -- soundfile's error type varies (LibsndfileError, RuntimeError)
        sf.info(path)
    main(["--model", str(packed), "--output", str(tmp_path / "o.tsv"), str(path)])
    _, rows = _tsv(tmp_path / "o.tsv")
    assert rows[0][0] == str(path)


def test_bad_files_are_reported_and_skipped(setup, tmp_path, capsys):
    tmp, packed, audio, files = setup
    bad = tmp_path / "corrupt.flac"
    bad.write_bytes(b"fLaC" + b"\x00" * 100)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    silent = tmp_path / "zero samples.wav"
    sf.write(silent, np.zeros(0, np.float32), 16000)
    inputs = [files[0], str(bad), str(empty), str(silent), str(tmp_path / "missing.ogg"), files[1]]
    out = tmp_path / "o.tsv"
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed), "--output", str(out), *inputs])
    assert e.value.code == 1
    err = capsys.readouterr().err
    for name in ["corrupt.flac", "empty.wav", "zero samples.wav", "missing.ogg"]:
        assert f"skipped {tmp_path / name}" in err
    _, rows = _tsv(out)
    assert [r[0] for r in rows] == [files[0], files[1]]  # the good ones are still written
    main(["--model", str(packed), "--output", str(out), "--skip_bad", "true", *inputs])  # exits 0
    assert [r[0] for r in _tsv(out)[1]] == [files[0], files[1]]


def test_subprocess_stdout_and_exit_codes(setup, tmp_path):
    tmp, packed, audio, files = setup
    cmd = [sys.executable, "-m", "captionbin.caption_infer", "--model", str(packed)]
    r = subprocess.run(cmd + [files[0]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "file\tcaption" and r.stdout.splitlines()[1].startswith(files[0] + "\t")
    r = subprocess.run(cmd + [files[0], str(tmp_path / "missing.wav")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "missing.wav" in r.stderr
    r = subprocess.run(cmd + ["--skip_bad", "true", str(tmp_path / "missing.wav"), files[0]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    r = subprocess.run(cmd + [str(tmp_path)], capture_output=True, text=True, timeout=300)  # no audio in it
    assert r.returncode == 1 and "no audio files" in r.stderr
    r = subprocess.run([sys.executable, "-m", "captionbin.caption_infer", "--model", str(tmp_path / "x.zip"), files[0]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "x.zip" in r.stderr


@pytest.mark.parametrize("opt, value", [("--beam_size", "0"), ("--max_len", "0"), ("--batch_size", "0"),
                                        ("--beam_size", "-1"), ("--nbest", "-1"), ("--ngpu", "-1"),
                                        ("--num_threads", "-5")])
def test_decoding_options_out_of_range_are_refused_before_loading(tmp_path, capsys, opt, value):
    """The check caption_decode uses (issue 25), before the packed model (here missing) is read."""
    with pytest.raises(SystemExit) as e:
        main(["--model", str(tmp_path / "missing.zip"), opt, value, str(tmp_path / "a.wav")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{opt} must be >= " in err and f"got {value}" in err and "missing.zip" not in err, err


def test_an_output_that_cannot_be_written_is_refused_before_loading(tmp_path, capsys):
    """caption_infer used to caption every file, then fail in a traceback writing --output."""
    with pytest.raises(SystemExit) as e:
        main(["--model", str(tmp_path / "missing.zip"), "--output", str(tmp_path), str(tmp_path / "a.wav")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--output {tmp_path}: is a directory" in err and "missing.zip" not in err, err



def test_an_output_that_is_an_input_is_refused(setup, tmp_path, capsys):
    """--output naming an audio file or the model replaced it with the TSV, exit status 0."""
    tmp, packed, audio, files = setup
    clip = tmp_path / "x.wav"
    clip.write_bytes((audio / "c.wav").read_bytes())
    for output in (clip, packed, tmp_path / "." / "x.wav"):
        with pytest.raises(SystemExit) as e:
            main(["--model", str(packed), "--output", str(output), str(clip)])
        assert e.value.code == 2
        assert f"{output}: is also an input" in capsys.readouterr().err
    assert clip.read_bytes() == (audio / "c.wav").read_bytes()


def test_captions_that_cannot_be_written_go_to_stdout(setup, tmp_path, capsys, monkeypatch):
    """A failed final write lost every caption in a traceback."""
    import captionlib.utils.fileio as fileio

    tmp, packed, audio, files = setup

    def fail(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio, "atomic_write_text", fail)
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed), "--output", str(tmp_path / "o.tsv"), str(audio / "c.wav")])
    out, err = capsys.readouterr()
    assert e.value.code == 1 and out.startswith("file\tcaption\n") and str(audio / "c.wav") in out
    assert f"could not write {tmp_path / 'o.tsv'}" in err and "the captions are on stdout" in err


# ------------------------------------------------------------------ image and video models
@pytest.fixture(scope="module")
def visual(tmp_path_factory):
    """Packed image and video models (the mini recipes' random_convnet), the recipes deleted, and
    a GIF animation of 6 photos with a PNG of its first frame as Pillow decodes it."""
    import shutil

    from PIL import Image

    from captionbin.caption_pack import main as pack

    tmp = tmp_path_factory.mktemp("visual")
    packed, confs = {}, {}
    for media_type in ("image", "video"):
        recipe = make_visual_recipe(tmp / media_type, media_type)
        packed[media_type] = tmp / f"{media_type}.zip"
        pack(visual_pack_args(recipe, packed[media_type]))
        confs[media_type] = tmp / f"feats_{media_type}.yaml"
        shutil.copy(recipe["feats_config"], confs[media_type])
        shutil.rmtree(tmp / media_type)
    frames = [Image.open(p).convert("RGB").resize((96, 72)) for p in IMAGES[:6]]
    gif = tmp / "anim.gif"
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=200, loop=0)
    with Image.open(gif) as im:
        im.convert("RGB").save(tmp / "first_frame.png")
    return tmp, packed, confs, gif, tmp / "first_frame.png"


def _stage2(conf, media_type, files, tmp_path):
    """Stage 2's features of ``files``: caption_extract_visual_feats with ``conf``."""
    from captionbin.caption_extract_visual_feats import main as extract
    from captionlib.io.feats import FeatReader

    scp = tmp_path / f"{media_type}.scp"
    scp.write_text("".join(f"clip-{i} {f}\n" for i, f in enumerate(files)))
    extract(["--config", str(conf), "--media_type", media_type, "--media_scp", str(scp),
             "--out_prefix", str(tmp_path / "dump" / "feats.1")])
    reader = FeatReader(str(tmp_path / "dump" / "feats.1.scp"))
    return [reader[f"clip-{i}"] for i in range(len(files))]


def test_video_model_captions_videos_gifs_and_images_from_stage2_features(visual, tmp_path):
    """caption_infer --model video.zip image.jpg video.avi anim.gif: stage 2's features (the same
    frames through the same CNN batches), one caption each."""
    tmp, packed, confs, gif, _ = visual
    files = [str(IMAGES[0]), str(VIDEOS[0]), str(gif)]
    main(["--model", str(packed["video"]), "--output", str(tmp_path / "o.json"), *files])
    got = json.loads((tmp_path / "o.json").read_text())
    captioner = PretrainedCaptioner.from_pretrained(packed["video"])
    assert [g["file"] for g in got] == files and [g["caption"] for g in got] == captioner.caption(files)
    feats = [captioner.features(f) for f in files]
    assert [f.shape for f in feats] == [(1, 64), (4, 64), (4, 64)]  # a still image is a one-frame video
    for ours, dumped in zip(feats, _stage2(confs["video"], "video", files, tmp_path)):
        np.testing.assert_array_equal(ours, dumped)


def test_image_model_directory_gif_first_frame_and_videos_refused(visual, tmp_path, capsys):
    tmp, packed, confs, gif, png = visual
    d = tmp_path / "photos"
    (d / "sub").mkdir(parents=True)
    import shutil

    for p in IMAGES[:3]:
        shutil.copy(p, d / "sub" / p.name)
    shutil.copy(gif, d / "anim.GIF")
    shutil.copy(VIDEOS[0], d / "clip.avi")  # not an image: not listed
    (d / "notes.txt").write_text("not listed")
    main(["--model", str(packed["image"]), "--output", str(tmp_path / "o.tsv"), str(d)])
    _, rows = _tsv(tmp_path / "o.tsv")
    files = [str(d / "anim.GIF")] + sorted(str(d / "sub" / p.name) for p in IMAGES[:3])
    assert [r[0] for r in rows] == files
    captioner = PretrainedCaptioner.from_pretrained(packed["image"])
    assert [r[1] for r in rows] == captioner.caption(files)
    # stage 2's features (a grid of 8x8 cells per image), up to the CNN's rounding by batch
    for path, dumped in zip(files, _stage2(confs["image"], "image", files, tmp_path)):
        assert dumped.shape == (64, 64)
        np.testing.assert_allclose(captioner.features(path), dumped, rtol=0, atol=1e-5)
    # an image model reads a GIF's first frame
    np.testing.assert_array_equal(captioner.features(gif), captioner.features(png))
    assert captioner.caption([gif]) == captioner.caption([png])
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed["image"]), "--output", str(tmp_path / "o.tsv"), str(VIDEOS[0]), files[1]])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert f"skipped {VIDEOS[0]}: a video, but {packed['image']} was trained on images" in err, err
    assert [r[0] for r in _tsv(tmp_path / "o.tsv")[1]] == [files[1]]
    r = subprocess.run([sys.executable, "-m", "captionbin.caption_infer", "--model", str(packed["image"]),
                        str(tmp_path / "dump")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "no image files" in r.stderr


def test_exported_backbone_travels_in_the_archive(tmp_path):
    """cnn exported: the .pt2 is packed; with the original file gone the archive alone gives stage
    2's features, at the image size saved in the .pt2."""
    from captionbin.caption_pack import main as pack
    from captionlib.visual.cnn import RandomConvNet, export_backbone

    pt2 = tmp_path / "net.pt2"
    export_backbone(RandomConvNet(seed=3).eval(), pt2, image_size=96, meta={"cnn": "random_convnet_seed3"})
    recipe = make_visual_recipe(tmp_path / "r", "image", {"cnn": "exported", "cnn_weights": str(pt2)})
    dumped = _stage2(recipe["feats_config"], "image", IMAGES[:2], tmp_path)
    packed = tmp_path / "exported.zip"
    pack(visual_pack_args(recipe, packed))
    data = pt2.read_bytes()
    pt2.unlink()
    captioner = PretrainedCaptioner.from_pretrained(packed)
    assert captioner.front_end.image_size == 96 and read_packed(packed)[1][CNN_MEMBER] == data
    for path, ref in zip(IMAGES[:2], dumped):
        np.testing.assert_allclose(captioner.features(path), ref, rtol=0, atol=1e-5)
    assert len(captioner.caption(IMAGES[:2])) == 2


def test_rerank_gives_one_caption_per_file_and_is_off_by_default(setup, tmp_path, capsys):
    """--rerank N: each file's caption is the consensus choice among its greedy caption and N
    samples (seeded by the file), over the files captioned together; 0 (packed default): greedy."""
    _, packed, _, files = setup
    outs = {}
    for name, extra in [("plain", []), ("ranked", ["--rerank", "4"]),
                        ("again", ["--rerank", "4", "--sample_top_p", "0.9", "--rerank_lm_weight", "0.5"])]:
        main(["--model", str(packed), "--output", str(tmp_path / f"{name}.tsv"), *extra, *files])
        outs[name] = _tsv(tmp_path / f"{name}.tsv")[1]
    assert [r[1] for r in outs["plain"]] == PretrainedCaptioner.from_pretrained(packed).caption(files)
    for name in ("ranked", "again"):
        assert [r[0] for r in outs[name]] == files and all(r[1].strip() for r in outs[name]), outs[name]
    ranked = PretrainedCaptioner.from_pretrained(packed, rerank=4).caption(files)
    assert [r[1] for r in outs["ranked"]] == ranked  # seeded by the files: the same choice again
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed), "--rerank", "-1", *files])
    assert e.value.code == 2 and "rerank must be >= 0" in capsys.readouterr().err
