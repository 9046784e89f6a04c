"""caption_score equals pycocoevalcap's COCOEvalCap (the official COCO caption evaluation).

The mini_mscoco fixture goes two ways: (1) ``caption_prepare_coco`` for each Karpathy split
-> one data dir -> ``caption_score`` on a hypothesis file; (2) a COCO-format annotation file
and results file (``[{"image_id", "caption"}]``) of the same captions -> pycocotools'
``COCO``/``loadRes`` -> ``COCOEvalCap.evaluate()``. BLEU-1..4, METEOR, ROUGE-L and CIDEr-D
(COCOEvalCap's ``CIDEr``, which is pycocoevalcap's CIDEr-D) must agree to 1e-6. SPICE is
not compared: COCOEvalCap's SPICE needs the Stanford CoreNLP jars (it is replaced by a stub
here, and caption_score reports it as skipped).
"""

import json
from pathlib import Path

import pytest

from captionbin import caption_prepare_coco, caption_score
from captionlib.io.datadir import read_scp, read_text, read_utt2spk, write_scp
from captionlib.metrics.pycoco import get_meteor, java_available

DATASET = Path(__file__).resolve().parents[2] / "egs" / "mini_mscoco" / "coco_fixture" / "dataset_coco.json"


def _hypothesis(images, i):
    """Varied hypotheses: a reference with a word dropped or swapped, or another image's caption."""
    own = images[i]["sentences"]
    if i % 3 == 0:
        return images[(i + 5) % len(images)]["sentences"][0]["raw"]  # a wrong caption
    if i % 3 == 1:
        return " ".join(own[0]["raw"].rstrip(".").split()[:-1])  # first reference, last word dropped
    return own[1]["raw"].replace(" a ", " the ", 1).lower()


class _NoSpice:
    """Stands in for pycocoevalcap's Spice (needs the CoreNLP jars, not shipped)."""

    def method(self):
        return "SPICE"

    def compute_score(self, gts, res):
        return 0.0, [0.0] * len(gts)


def test_caption_score_equals_cocoevalcap(tmp_path, monkeypatch):
    reason = java_available()
    if reason is not None:
        pytest.skip(f"the PTB tokenizer and METEOR need Java: {reason}")
    pytest.importorskip("pycocotools")
    import pycocoevalcap.eval
    from pycocoevalcap.eval import COCOEvalCap
    from pycocotools.coco import COCO

    images = json.loads(DATASET.read_text(encoding="utf-8"))["images"]
    hyps = {im["cocoid"]: _hypothesis(images, i) for i, im in enumerate(images)}
    assert len(set(hyps.values())) == len(images) == 12

    # (1) our pipeline: the three Karpathy splits prepared and merged into one data dir
    text, utt2spk, clip2id = {}, {}, {}
    for split in ("train", "val", "test"):
        d = tmp_path / "data" / split
        caption_prepare_coco.main(["--dataset_json", str(DATASET), "--split", split, "--output_dir", str(d)])
        text.update(read_text(d / "text"))
        utt2spk.update(read_utt2spk(d / "utt2spk"))
        clip2id.update(read_scp(d / "clip2id"))
    ref_dir = tmp_path / "data" / "all"
    write_scp(ref_dir / "text", text)
    write_scp(ref_dir / "utt2spk", utt2spk)
    assert len(set(utt2spk.values())) == 12 and len(text) == 60
    assert sorted(int(v) for v in clip2id.values()) == sorted(hyps)
    hyp = tmp_path / "hyp.txt"
    write_scp(hyp, {clip: hyps[int(cocoid)] for clip, cocoid in clip2id.items()})
    no_jars = tmp_path / "no_spice_jars"
    no_jars.mkdir()
    monkeypatch.delenv("CAPTIONLIB_SPICE_LIB", raising=False)
    caption_score.main(["--ref_dir", str(ref_dir), "--hyp", str(hyp), "--output", str(tmp_path / "score.json"),
                        "--spice_lib_dir", str(no_jars)])
    ours = json.loads((tmp_path / "score.json").read_text(encoding="utf-8"))

    # (2) the official COCO evaluation on COCO-format files of the same captions
    ann = {"info": {"description": "mini_mscoco fixture"}, "licenses": [], "type": "captions",
           "images": [{"id": im["cocoid"], "file_name": im["filename"]} for im in images],
           "annotations": [{"image_id": im["cocoid"], "id": s["sentid"], "caption": s["raw"]}
                           for im in images for s in im["sentences"]]}
    (tmp_path / "captions_mini.json").write_text(json.dumps(ann), encoding="utf-8")
    results = [{"image_id": cocoid, "caption": h} for cocoid, h in hyps.items()]
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    coco = COCO(str(tmp_path / "captions_mini.json"))
    coco_res = coco.loadRes(str(tmp_path / "results.json"))
    monkeypatch.setattr(pycocoevalcap.eval, "Spice", _NoSpice)
    monkeypatch.setattr(pycocoevalcap.eval, "Meteor", get_meteor)  # the same jar, one shared JVM
    evaluator = COCOEvalCap(coco, coco_res)
    evaluator.evaluate()
    theirs = evaluator.eval

    pairs = [(f"BLEU-{k}", f"Bleu_{k}") for k in range(1, 5)]
    pairs += [("METEOR", "METEOR"), ("ROUGE-L", "ROUGE_L"), ("CIDEr-D", "CIDEr")]
    for our_key, coco_key in pairs:
        assert ours[our_key] == pytest.approx(theirs[coco_key], abs=1e-6), our_key
    assert 0.05 < theirs["CIDEr"] < 5 and theirs["Bleu_1"] < 1  # not a degenerate (all equal) case
    assert ours["SPICE"] is None and "SPICE" in ours["skipped"]
