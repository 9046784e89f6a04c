"""captionlib.pretrained: packed models load alone, compute the dump's features at any sample
rate, give stage 8's captions, and n-best scores are the beam's log-prob sums."""

import hashlib
import json
import shutil
import zipfile

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from captionlib.audio.features import LogMel
from captionlib.audio.io import load_audio
from captionlib.packed import PACKED_FORMAT, PretrainedCaptioner, find_audio_files, pack_model, read_packed
from packed_models import CLIPS, FEATS_CONFIG, TRAIN_ENV, make_packed, make_recipe, write_variant

MEMBERS = {"manifest.json", "model.pth", "config.yaml", "tokens.txt", "feats_config.yaml", "feats_stats.npz",
           "cider_df.npz", "decode_config.yaml"}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return make_packed(tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def captioner(packed):
    return PretrainedCaptioner.from_pretrained(packed)


def test_archive_stands_alone_and_manifest_has_the_fields(packed, tmp_path):
    # make_packed deleted the recipe dir; load a copy from elsewhere too
    copy = tmp_path / "elsewhere" / "model.zip"
    copy.parent.mkdir()
    shutil.copy(packed, copy)
    with zipfile.ZipFile(copy) as z:
        assert set(z.namelist()) == MEMBERS
        tokens = z.read("tokens.txt").decode().splitlines()
        decode = yaml.safe_load(z.read("decode_config.yaml"))
        feats = yaml.safe_load(z.read("feats_config.yaml"))
    manifest, members = read_packed(copy)
    assert manifest["format"] == PACKED_FORMAT and manifest["version"] == 1
    assert manifest["recipe"] == "mini_test"
    assert manifest["git_revision"] == "unknown" or len(manifest["git_revision"]) == 40
    assert manifest["date"].endswith("Z") and manifest["date"][:2] == "20"
    assert manifest["train_environment"] == [TRAIN_ENV]  # the model dir's env.yaml
    assert manifest["metrics"] == {"CIDEr-D": 0.123, "BLEU-4": 0.05}
    assert manifest["train_sample_rates"] == {"44100": len(CLIPS)}
    assert {f["name"] for f in manifest["files"]} == MEMBERS - {"manifest.json"}
    assert all(f["bytes"] == len(members[f["name"]]) for f in manifest["files"])
    assert tokens[0] == "<blank>" and tokens[-1] == "<sos/eos>"
    assert decode == {"beam_size": 2, "batch_size": 2, "max_len": 8, "length_penalty": 0.0, "rerank": 0,
                      "rerank_lm_weight": 0.0, "sample_temperature": 1.0, "sample_top_k": 0, "sample_top_p": 1.0}
    assert {k: feats[k] for k in FEATS_CONFIG} == FEATS_CONFIG and "dtype" in feats and "wav_scp" not in feats
    c = PretrainedCaptioner.from_pretrained(copy, beam_size=3)
    assert c.decode_config["beam_size"] == 3 and c.decode_config["max_len"] == 8
    assert c.sample_rate == 44100  # fs: null, all training audio at 44.1 kHz
    assert all(isinstance(cap, str) for cap in c.caption(CLIPS))


def test_captions_equal_dump_and_decode(captioner, packed, tmp_path):
    """Stage 2 (caption_dump_feats) + stage 8 (caption_decode) on the model file in the archive
    give the captions of PretrainedCaptioner on the audio files."""
    from captionbin.caption_decode import main as decode
    from captionbin.caption_dump_feats import main as dump

    scp = tmp_path / "wav.scp"
    scp.write_text("".join(f"clip-{i} {p}\n" for i, p in enumerate(CLIPS)))
    dump(["--wav_scp", str(scp), "--out_prefix", str(tmp_path / "feats"), "--n_mels", "64"])
    with zipfile.ZipFile(packed) as z:
        (tmp_path / "model.pth").write_bytes(z.read("model.pth"))
    decode(["--model_file", str(tmp_path / "model.pth"), "--feats_scp", str(tmp_path / "feats.scp"),
            "--output_dir", str(tmp_path / "dec"), "--beam_size", "2", "--batch_size", "2", "--max_len", "8"])
    stage8 = dict(line.split(" ", 1) if " " in line else (line, "")
                  for line in (tmp_path / "dec" / "text").read_text().splitlines())
    assert captioner.caption(CLIPS) == [stage8[f"clip-{i}"] for i in range(len(CLIPS))]


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_features_at_any_rate_mono_or_stereo(captioner, tmp_path, rate):
    wave, sr = load_audio(CLIPS[0])
    mono = write_variant(tmp_path / "mono.flac", wave, sr, rate, 1)
    stereo = write_variant(tmp_path / "stereo.ogg", wave, sr, rate, 2)
    ref = LogMel()(*load_audio(mono, fs=44100))
    got = captioner.features(mono)
    np.testing.assert_array_equal(got, ref)  # exactly the dump's code path
    assert abs(got.shape[0] - 101) <= 1  # 2 s at a 20 ms hop, resampled to 44.1 kHz
    st = captioner.features(stereo)
    np.testing.assert_array_equal(st, LogMel()(*load_audio(stereo, fs=44100)))
    assert st.shape == got.shape
    caps = captioner.caption([mono, stereo])
    assert len(caps) == 2 and all(isinstance(c, str) for c in caps)


def test_sample_rate_policy(tmp_path):
    # fs in the feature config wins
    c = PretrainedCaptioner.from_pretrained(make_packed(tmp_path / "a", feats_config={**FEATS_CONFIG, "fs": 16000}))
    assert c.sample_rate == 16000
    wave, sr = load_audio(CLIPS[0])
    f = write_variant(tmp_path / "x.wav", wave, sr, 22050, 1)
    np.testing.assert_array_equal(c.features(f), LogMel()(*load_audio(f, fs=16000)))
    # fs: null and training audio at several rates: each file's own rate, as the dump does
    recipe = make_recipe(tmp_path / "b")
    pack_model(tmp_path / "b.zip", recipe["model_file"], recipe["train_config"], FEATS_CONFIG,
               recipe["feats_stats"], recipe["cider_df"], {16000: 2, 44100: 2}, revision="abc")
    c = PretrainedCaptioner.from_pretrained(tmp_path / "b.zip")
    assert c.sample_rate is None and c.decode_config["beam_size"] == 1  # no decode config packed
    np.testing.assert_array_equal(c.features(f), LogMel()(*load_audio(f)))
    assert read_packed(tmp_path / "b.zip")[0]["metrics"] is None


def test_nbest_scores_are_the_beams_log_prob_sums(captioner):
    nbest = captioner.caption_nbest(CLIPS[:2], 3)
    assert [len(n) for n in nbest] == [3, 3]
    model, tok = captioner.model, captioner.tokenizer
    for path, hyps in zip(CLIPS[:2], nbest):
        scores = [s for _, s in hyps]
        assert scores == sorted(scores, reverse=True)
        feats = torch.from_numpy(captioner.features(path))[None]
        with torch.no_grad():
            v = model.encode(feats, torch.tensor([feats.size(1)]))
            for caption, score in hyps:
                ids = [tok.token2id[w] for w in caption.split()] + [tok.eos_id]
                logp, state = model.first_step(v)
                total = 0.0
                for t, i in enumerate(ids):
                    if t == captioner.decode_config["max_len"] - 1:
                        break  # eos forced at max_len costs 0
                    total += float(logp[0, i])
                    if t + 1 < len(ids):
                        logp, state = model.step(torch.tensor([i]), state)
                assert total == pytest.approx(score, abs=1e-4), caption


def test_caption_files_skips_or_raises(captioner, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio" * 20)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    res = captioner.caption_files([CLIPS[0], bad, empty, tmp_path / "missing.wav"], skip_bad=True)
    assert res[0].error is None and res[0].caption is not None
    assert "bad.wav: cannot read audio" in res[1].error
    assert "empty.wav: empty audio" in res[2].error
    assert "missing.wav" in res[3].error and res[3].caption is None
    with pytest.raises(ValueError, match="bad.wav"):
        captioner.caption([CLIPS[0], bad])


def test_read_packed_rejects_foreign_or_corrupt(packed, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.zip"):
        read_packed(tmp_path / "nope.zip")
    (tmp_path / "text.zip").write_text("hello")
    with pytest.raises(ValueError, match="text.zip: not a packed captionlib model"):
        read_packed(tmp_path / "text.zip")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="other.zip: not a packed captionlib model"):
        read_packed(tmp_path / "other.zip")
    with zipfile.ZipFile(packed) as src, zipfile.ZipFile(tmp_path / "bad.zip", "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "manifest.json":
                m = json.loads(data)
                m["version"] = 99
                data = json.dumps(m)
            dst.writestr(name, data if name != "config.yaml" else b"changed")
    with pytest.raises(ValueError, match="version 99 is newer"):
        read_packed(tmp_path / "bad.zip")
    with pytest.raises(ValueError, match="unknown decoding options"):
        PretrainedCaptioner.from_pretrained(packed, beam=3)
    _assert_tampered_manifests_are_named(packed, tmp_path)
    for key, least in (("beam_size", 1), ("batch_size", 1), ("max_len", 2)):
        with pytest.raises(ValueError, match=f"{key} must be >= {least}"):
            PretrainedCaptioner.from_pretrained(packed, **{key: least - 1})


def test_find_audio_files(tmp_path):
    for rel in ["b/2.FLAC", "b/1.wav", "a.mp3", "c/d/e.ogg", "notes.txt", "b/x.m4a"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    got = find_audio_files([tmp_path, "given.m4a"])
    rel = [str(p)[len(str(tmp_path)) + 1:] for p in got[:-1]]
    assert rel == ["a.mp3", "b/1.wav", "b/2.FLAC", "b/x.m4a", "c/d/e.ogg"] and got[-1] == "given.m4a"
    # linked directories are walked (they were skipped silently), each real directory once
    other = tmp_path.parent / (tmp_path.name + "_other")
    (other / "sub").mkdir(parents=True)
    (other / "sub" / "z.wav").write_bytes(b"")
    (tmp_path / "more").symlink_to(other)
    (other / "back").symlink_to(other)  # a cycle
    rel = [str(p)[len(str(tmp_path)) + 1:] for p in find_audio_files([tmp_path])]
    assert rel == ["a.mp3", "b/1.wav", "b/2.FLAC", "b/x.m4a", "c/d/e.ogg", "more/sub/z.wav"]


def test_tsv_fields_with_a_carriage_return_read_back_as_one_row():
    """A file name holding a lone CR was written unquoted; csv.reader split its row in two."""
    import csv
    import io

    from captionlib.packed import CaptionResult, format_results

    results = [CaptionResult("a\rb.wav", "a dog barks"), CaptionResult("c\td.wav", "rain"),
               CaptionResult("e.wav", "wind")]
    rows = list(csv.reader(io.StringIO(format_results(results, "tsv"), newline=""), delimiter="\t"))
    assert rows == [["file", "caption"], ["a\rb.wav", "a dog barks"], ["c\td.wav", "rain"], ["e.wav", "wind"]]
    assert format_results(results, "tsv").endswith("\ne.wav\twind\n")  # other rows stay unquoted


def test_a_packed_strict_makes_a_truncated_file_an_error(tmp_path):
    """stage 2 with strict: true refuses a WAV shorter than its header says; caption_infer
    warned and captioned it, the packed strict ignored."""
    wave, sr = load_audio(CLIPS[0])
    whole = tmp_path / "whole.wav"
    sf.write(whole, wave[: sr], sr, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole.read_bytes()[:-2000])
    lenient = PretrainedCaptioner.from_pretrained(make_packed(tmp_path / "a"))
    strict = PretrainedCaptioner.from_pretrained(make_packed(tmp_path / "b",
                                                             feats_config={**FEATS_CONFIG, "strict": True}))
    assert lenient.caption_files([cut], skip_bad=True)[0].error is None
    result = strict.caption_files([cut, whole], skip_bad=True)
    assert result[0].error is not None and "cut.wav" in result[0].error and result[1].error is None


def _assert_tampered_manifests_are_named(packed, tmp_path):
    """A member the manifest does not list (a 2 GiB one was read whole into memory), a member
    of another size than listed (refused before it is read), and a manifest of the wrong
    shape (tracebacks) are errors naming the archive."""
    def rewrite(name, change_manifest=None, extra=None):
        with zipfile.ZipFile(packed) as src, zipfile.ZipFile(tmp_path / name, "w") as dst:
            for member in src.namelist():
                data = src.read(member)
                if member == "manifest.json" and change_manifest:
                    m = json.loads(data)
                    change_manifest(m)
                    data = json.dumps(m)
                dst.writestr(member, data)
            for member, data in (extra or {}).items():
                dst.writestr(member, data)
        return tmp_path / name

    cases = [
        (rewrite("extra.zip", extra={"big.bin": b"0" * 1000}), "members not in its manifest.json: big.bin"),
        (rewrite("size.zip", lambda m: m["files"][0].update(bytes=1)), "whose size is not the one in its manifest"),
        (rewrite("noname.zip", lambda m: m["files"][0].pop("name")), "'files' is not a list of {name, bytes, sha256}"),
        (rewrite("version.zip", lambda m: m.update(version="abc")), "has version 'abc', not a number"),
    ]
    for path, expected in cases:
        with pytest.raises(ValueError) as e:
            read_packed(path)
        assert str(e.value).startswith(f"{path}: ") and expected in str(e.value), str(e.value)
    # members that are not the configs they should be (the manifest's SHA-256 made to match)
    for member, data, expected in [("decode_config.yaml", b"", "decode_config.yaml must be a mapping"),
                                   ("decode_config.yaml", b"beam_size: abc\n", "beam_size must be a number, got 'abc'"),
                                   ("feats_config.yaml", b"- a\n", "feats_config.yaml must be a mapping"),
                                   ("feats_config.yaml", b"a: !!python/object/apply:os.system [ls]\n", "not YAML")]:
        def change(m, member=member, data=data):
            entry = next(e for e in m["files"] if e["name"] == member)
            entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

        path = rewrite("member.zip", change)
        with zipfile.ZipFile(tmp_path / "m2.zip", "w") as dst:
            for name in zipfile.ZipFile(path).namelist():
                dst.writestr(name, data if name == member else zipfile.ZipFile(path).read(name))
        with pytest.raises(ValueError) as e:
            PretrainedCaptioner.from_pretrained(tmp_path / "m2.zip")
        assert str(e.value).startswith(f"{tmp_path / 'm2.zip'}") and expected in str(e.value), str(e.value)
