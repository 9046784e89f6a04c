"""The training options are written once: the binaries' parsers are generated from the
options dataclasses (issue 23)."""

import ast
import dataclasses
from pathlib import Path

import pytest

from captionlib.rl.options import RLOptions
from captionlib.train.options import TrainOptions, XEOptions

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("binary, cls", [("caption_train", XEOptions), ("caption_rl_train", RLOptions)])
def test_argparse_defaults_equal_the_dataclass_defaults(binary, cls):
    import importlib

    args = vars(importlib.import_module(f"captionbin.{binary}").get_parser().parse_args([]))
    defaults = dataclasses.asdict(cls())
    assert {k: args[k] for k in defaults} == defaults
    assert set(args) - set(defaults) == {"config", "print_config", "log_level"}


def test_rl_and_xe_share_the_common_options_and_rl_has_its_own_lr():
    common = {f.name for f in dataclasses.fields(TrainOptions)}
    assert common <= {f.name for f in dataclasses.fields(XEOptions)}
    assert common <= {f.name for f in dataclasses.fields(RLOptions)}
    assert (XEOptions().lr, RLOptions().lr) == (5e-4, 5e-5)
    assert XEOptions().encoder_conf is not XEOptions().encoder_conf  # a fresh dict per instance


def test_a_default_is_written_once():
    """No ``max_len=30``-style keyword default of a training option in the entry points
    (``None``, "not given", is allowed)."""
    names = {f.name for cls in (XEOptions, RLOptions) for f in dataclasses.fields(cls)}
    for path in ("captionlib/train/xe.py", "captionlib/rl/train.py", "captionlib/train/fit.py",
                 "captionbin/caption_train.py", "captionbin/caption_rl_train.py"):
        for node in ast.walk(ast.parse((REPO / path).read_text())):
            if isinstance(node, ast.FunctionDef):
                args = node.args.args[len(node.args.args) - len(node.args.defaults):] + [
                    a for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
                defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
                # None means "not given", not a value of the option
                args = [a for a, d in zip(args, defaults) if not (isinstance(d, ast.Constant) and d.value is None)]
                assert not {a.arg for a in args} & names, f"{path}:{node.lineno} {node.name} repeats option defaults"


def test_library_signatures_refer_to_the_option_defaults():
    """The objectives and the trainer take an option's default from the dataclass (e.g.
    ``max_len: int = DEFAULTS.max_len``) or from the objective's ``rl_conf`` dataclass
    (``SLEConf.alpha``), never a copy of its value (``max_len=30``); an objective's own
    different default (multitask's 5 samples, the paper's) is not a copy."""
    import sys

    from captionlib.rl import RL_ALGOS, objective_class

    def option_defaults(*classes):
        out = {}
        for cls in classes:
            for f in dataclasses.fields(cls):
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default
                out.setdefault(f.name, []).append(default)
        return out

    confs = {}  # file -> the rl_conf dataclasses of its objectives (and their bases)
    for algo in RL_ALGOS:
        for conf in objective_class(algo).Conf.__mro__[:-1]:
            confs.setdefault(Path(sys.modules[conf.__module__].__file__).resolve(), set()).add(conf)
    copies = []
    for path in sorted([*(REPO / "captionlib" / "rl").glob("*.py"), *(REPO / "captionlib" / "train").glob("*.py")]):
        defaults = option_defaults(XEOptions, RLOptions, *confs.get(path.resolve(), ()))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            pairs = list(zip(node.args.args[len(node.args.args) - len(node.args.defaults):], node.args.defaults))
            pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
            for arg, d in pairs:
                if (isinstance(d, ast.Constant) and d.value is not None and arg.arg in defaults
                        and any(d.value == v and type(d.value) is type(v) for v in defaults[arg.arg])):
                    copies.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}({arg.arg}={d.value!r})")
    assert not copies, "option defaults copied:\n" + "\n".join(copies)


def test_typo_in_yaml_still_fails(tmp_path):
    from captionbin.caption_rl_train import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("num_sampels: 5\n")
    with pytest.raises(SystemExit):
        main(["--config", str(bad), "--print_config"])


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in sorted(list((REPO / "captionlib").rglob("*.py")) + list((REPO / "captionbin").rglob("*.py"))):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not long, "functions longer than 80 lines:\n" + "\n".join(long)


@pytest.mark.parametrize("binary, args, message", [
    ("caption_train", ["--lr", "0"], "lr must be > 0, got 0.0"),
    ("caption_train", ["--batch_size", "0"], "batch_size must be >= 1, got 0"),
    ("caption_train", ["--label_smoothing", "1"], "label_smoothing must be in [0, 1), got 1.0"),
    # the model's configs, by name (the vocabulary and feature dimension do not exist yet)
    ("caption_train", ["--decoder_conf", "{hidden_sise: 8}"],
     "decoder_conf (decoder 'gru'): unknown key(s) 'hidden_sise' of GRUDecoder"),
    ("caption_train", ["--encoder", "cnn14", "--encoder_conf", "{transformer: {nheads: 2}}"],
     "encoder_conf.transformer: unknown key(s) 'nheads' of TransformerEncoderStack"),
    ("caption_train", ["--specaug", "true", "--specaug_conf", "{time_mask: 2}"],
     "specaug_conf: unknown key(s) 'time_mask' of SpecAugment"),
    ("caption_train", ["--freeze_encoder", "-1"], "freeze_encoder must be >= 0, got -1"),
    ("caption_train", ["--encoder_conf", "{freeze: 2}"],
     "encoder_conf.freeze moved to the option freeze_encoder (the same in XE and RL): write 'freeze_encoder: 2'"),
    ("caption_rl_train", ["--freeze_encoder", "maybe"],
     "argument --freeze_encoder: expected true, false or a whole number, got 'maybe'"),
    ("caption_train", ["--encoder_conf", "{pretrained: x.pth}"],
     "encoder_conf.pretrained: encoder 'crnn' has no checkpoint loader"),
    ("caption_train", ["--encoder", "cnn14", "--encoder_conf", "{pretrained: x.pth}", "--init_param", "y.pth"],
     "encoder_conf.pretrained and init_param both initialise the encoder"),
    ("caption_train", ["--decoder_conf", "{hidden_size: [8}"],  # was a yaml traceback
     "argument --decoder_conf: not a YAML mapping: '{hidden_size: [8}': expected ',' or ']', but got '}' at column 17"),
    ("caption_train", ["--decoder_conf", "{a: 1, a: 2}"],
     "argument --decoder_conf: not a YAML mapping: '{a: 1, a: 2}': found duplicate key 'a' at column 8"),
    ("caption_rl_train", ["--max_epoch", "0"], "max_epoch must be >= 1, got 0"),
    # an objective's own options: its rl_conf block, checked by its class's Conf
    ("caption_rl_train", ["--rl_algo", "sle", "--rl_conf", "alpha=1.5"],
     "rl_conf (rl_algo sle): alpha must be in [0, 1], got 1.5"),
    ("caption_rl_train", ["--rl_algo", "reinforce_plus", "--rl_conf", "num_samples=0"],
     "rl_conf (rl_algo reinforce_plus): num_samples must be >= 1, got 0"),
    ("caption_rl_train", ["--rl_algo", "sle", "--rl_conf", "{num_samples: two}"],
     "rl_conf (rl_algo sle): num_samples must be an int, got 'two'"),
    ("caption_rl_train", ["--rl_algo", "mc_pg", "--rl_conf", "sample_logprobs=recompute"],
     "rl_conf (rl_algo mc_pg): unknown key 'sample_logprobs'; its keys: critic_lr, num_rollouts"),
    ("caption_rl_train", ["--rl_algo", "ac", "--rl_conf", "entropy_weight=0.01"],
     "rl_conf (rl_algo ac): unknown key 'entropy_weight'; its keys: critic_lr, sample_logprobs,"),
    ("caption_rl_train", ["--rl_algo", "scst", "--rl_conf", "{baseline: mean}"],
     "rl_conf (rl_algo scst): unknown key 'baseline'; its keys: sample_logprobs, baseline_encoding, entropy_weight"),
    ("caption_rl_train", ["--rl_algo", "sle", "--rl_conf", "num_samples=1"],
     "rl_conf (rl_algo sle): num_samples must be >= 2, got 1"),
    ("caption_rl_train", ["--rl_algo", "reinforce_plus", "--rl_conf", "baseline=mean"],
     "baseline 'mean' needs num_samples >= 2"),
    ("caption_rl_train", ["--rl_algo", "multitask", "--rl_conf", "baseline=mean"],
     "baseline 'mean' needs num_samples >= 2"),
    # an option that was a top-level key before the rl_conf blocks: where it goes now
    ("caption_rl_train", ["--rl_algo", "sle", "--num_samples", "5"],
     "--num_samples moved into --rl_conf: give it as --rl_conf num_samples=5"),
    ("caption_rl_train", ["--rl_algo", "sle", "--sle_distance=bleu34_mean"],
     "--sle_distance moved into --rl_conf: give it as --rl_conf distance=bleu34_mean"),
    ("caption_rl_train", ["--reward", "cider_d:1,bleu:1"], "reward 'cider_d:1,bleu:1': unknown metric 'bleu'"),
    ("caption_rl_train", ["--reward", "spider", "--spice_lib_dir", "/nonexistent"], "needs SPICE, which cannot run"),
])
def test_a_bad_value_is_one_line_before_anything_is_loaded(binary, args, message, tmp_path, capsys):
    """Issue 25: the data dirs do not even exist; the value is refused first, naming the key."""
    import importlib

    required = ["--train_data_dir", str(tmp_path / "nope"), "--valid_data_dir", str(tmp_path / "nope"),
                "--output_dir", str(tmp_path / "exp")]
    required += ["--token_list", "x"] if binary == "caption_train" else ["--init_param", "x", "--cider_df", "y"]
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"captionbin.{binary}").main(required + args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("binary, args", [
    ("caption_train", ["--token_list", "x"]),
    ("caption_rl_train", ["--init_param", "x", "--cider_df", "y"]),
    ("caption_rl_train", ["--init_param", "x", "--cider_df", "y", "--rl_algo", "scst", "--rl_conf",
                          "entropy_weight=0.01"]),
    ("caption_rl_train", ["--init_param", "x", "--cider_df", "y", "--rl_algo", "sle", "--rl_conf",
                          "{num_samples: 2, distance: bleu34_mean}"]),
])
def test_check_only_exits_0_on_valid_options_loading_and_writing_nothing(binary, args, tmp_path, capsys):
    """caption.sh runs --check_only for stage 5 and for every --rl_algo before anything trains."""
    import importlib

    cmd = ["--train_data_dir", str(tmp_path / "nope"), "--valid_data_dir", str(tmp_path / "nope"),
           "--output_dir", str(tmp_path / "exp"), "--check_only", "true", *args]
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"captionbin.{binary}").main(cmd)
    assert e.value.code == 0
    assert "the options are valid" in capsys.readouterr().err
    assert not (tmp_path / "exp").exists()


def test_tagging_checks_its_encoder_conf_before_anything_is_loaded(tmp_path, capsys):
    from captionbin.caption_pretrain_tagging import main

    cmd = ["--train_data_dir", str(tmp_path / "nope"), "--valid_data_dir", str(tmp_path / "nope"),
           "--output_dir", str(tmp_path / "exp"), "--encoder", "cnn10"]
    with pytest.raises(SystemExit) as e:
        main(cmd + ["--encoder_conf", "{drop_out: 0.2}"])
    assert e.value.code == 2 and ("encoder_conf (encoder 'cnn10'): unknown key(s) 'drop_out' of Cnn10"
                                  in capsys.readouterr().err)
    with pytest.raises(SystemExit) as e:
        main(cmd + ["--encoder_conf", "{classes_num: 3}"])
    assert e.value.code == 2 and "encoder_conf.classes_num is set from the labels" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(cmd + ["--encoder_conf", "dropout=0.1", "--check_only", "true"])
    assert e.value.code == 0 and not (tmp_path / "exp").exists()


def test_library_calls_with_check_only_load_and_write_nothing(tmp_path):
    from captionlib.rl.train import train_rl
    from captionlib.train.options import TaggingOptions
    from captionlib.train.tagging import train_tagging
    from captionlib.train.xe import train_xe

    common = dict(train_data_dir=str(tmp_path / "nope"), valid_data_dir=str(tmp_path / "nope"),
                  output_dir=str(tmp_path / "exp"), check_only=True)
    train_xe(XEOptions(token_list="x", **common))
    train_rl(RLOptions(init_param="x", cider_df="y", **common))
    train_tagging(TaggingOptions(**common))
    assert not (tmp_path / "exp").exists()
    with pytest.raises(ValueError, match="lr must be > 0"):
        train_tagging(TaggingOptions(lr=0.0, **common))


def test_library_calls_are_checked_too_and_a_bad_model_key_is_named(tmp_path):
    from captionlib.rl.train import train_rl
    from captionlib.train.xe import train_xe

    with pytest.raises(ValueError, match="lr must be > 0, got 0"):
        train_xe(XEOptions(lr=0.0))
    with pytest.raises(ValueError, match="rl_algo must be one of scst, .*got 'scts'"):
        train_rl(RLOptions(rl_algo="scts"))
    data = tmp_path / "dump"
    data.mkdir()
    (data / "feats_dim").write_text("16\n")
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("<blank>\n<unk>\na\n<sos/eos>\n")
    opts = XEOptions(train_data_dir=str(data), valid_data_dir=str(data), output_dir=str(tmp_path / "exp"),
                     token_list=str(tokens), encoder="linear", decoder="gru", decoder_conf={"hidden_sise": 8})
    with pytest.raises(ValueError,
                       match=r"decoder_conf \(decoder 'gru'\): unknown key\(s\) 'hidden_sise' of GRUDecoder"):
        train_xe(opts)


def test_an_old_flat_rl_key_in_a_config_file_names_where_it_goes(tmp_path, capsys):
    """A recipe config of before the rl_conf blocks fails with the line to write instead."""
    from captionbin.caption_rl_train import main

    conf = tmp_path / "train_sle.yaml"
    conf.write_text("reward: cider_d:1.0\nnum_samples: 5\nac_reward: embedding\n")
    with pytest.raises(SystemExit) as e:
        main(["--config", str(conf), "--rl_algo", "sle", "--train_data_dir", "d", "--valid_data_dir", "d",
              "--output_dir", str(tmp_path / "exp"), "--init_param", "x", "--cider_df", "y"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert f"{conf}: key 'num_samples' moved into rl_conf: write 'rl_conf: {{num_samples: 5}}'" in err
    assert f"{conf}: key 'ac_reward' moved into rl_conf: write 'rl_conf: {{reward_type: embedding}}'" in err


def test_rl_help_lists_the_objective_block(capsys):
    from captionbin.caption_rl_train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    plain = capsys.readouterr().out
    assert "--rl_algo X --help" in plain and "num_rollouts" not in plain
    assert len([w for w in plain.split() if w.startswith("--") and w.strip("[],") == w]) > 0
    with pytest.raises(SystemExit):
        main(["--rl_algo", "mc_pg", "--help"])
    out = capsys.readouterr().out
    assert "--rl_conf keys of --rl_algo mc_pg (Liu et al. 2017 (MC-PG))" in out
    assert "  num_rollouts (int, default 3; >= 1): K, Monte-Carlo rollouts per step" in out
