"""caption_pack: parser, the packed feature/decode configs, errors naming the file."""

import zipfile

import pytest
import yaml

from packed_models import make_recipe, pack_args
from captionbin.caption_pack import get_parser, main
from captionlib.pretrained import read_packed


def test_get_parser_and_usage():
    assert get_parser() is not None
    with pytest.raises(SystemExit):
        main([])


def test_pack_with_decode_args(tmp_path):
    recipe = make_recipe(tmp_path / "r")
    out = tmp_path / "out" / "packed.zip"
    main(pack_args(recipe, out, "--decode_args=--beam_size 4 --length_penalty 0.5"))
    manifest, members = read_packed(out)
    assert yaml.safe_load(members["decode_config.yaml"]) == {
        "beam_size": 4, "batch_size": 2, "max_len": 8, "length_penalty": 0.5}
    assert manifest["model_file"] == recipe["model_file"]
    assert members["config.yaml"] == open(recipe["train_config"], "rb").read()
    assert not list(out.parent.glob("*.tmp"))  # written atomically
    with zipfile.ZipFile(out) as z:
        assert z.testzip() is None


def test_missing_input_fails_naming_it(tmp_path, capsys):
    recipe = make_recipe(tmp_path / "r")
    args = pack_args(recipe, tmp_path / "p.zip")
    args[args.index("--score_json") + 1] = str(tmp_path / "nope" / "score.json")
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 1 and "nope/score.json" in capsys.readouterr().err
    assert not (tmp_path / "p.zip").exists()
    args = pack_args(recipe, tmp_path / "p.zip", "--cider_df", str(tmp_path / "df.pkl"))
    with pytest.raises(SystemExit):
        main(args)
    assert "df.pkl: no such file" in capsys.readouterr().err
