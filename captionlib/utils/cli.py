"""Shared command-line plumbing of the captionbin binaries.

Every binary builds its parser with :func:`get_base_parser` (configargparse with a
YAML ``--config``; command line beats config file beats defaults), parses strictly
with :func:`parse_args` (a misspelled YAML key is an error, as in ESPnet2), and logs
its command line first with :func:`setup_logging` + :func:`get_commandline_args`.
"""

import argparse
import copy
import dataclasses
import importlib
import logging
import math
import os
import re
import shlex
import signal
import socket
import sys
import textwrap
import threading
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

import configargparse
import yaml

LOG_FORMAT = "%(asctime)s (%(module)s:%(lineno)d) %(levelname)s: %(message)s"


def str2bool(value: str) -> bool:
    """Parse ``true/false/yes/no/1/0`` (case-insensitive) for argparse.

    Raises:
        argparse.ArgumentTypeError: for any other string.
    """
    v = str(value).strip().lower()
    if v in ("true", "yes", "1", "y"):
        return True
    if v in ("false", "no", "0", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {value!r}")


def int_or_none(value: str) -> Optional[int]:
    """Parse an int, or ``none``/``null`` to ``None``."""
    if str(value).strip().lower() in ("none", "null", ""):
        return None
    return int(value)


def str_or_none(value: str) -> Optional[str]:
    """Return ``None`` for ``none``/``null``/empty, else the string itself."""
    if str(value).strip().lower() in ("none", "null", ""):
        return None
    return value


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error of a one-line value as one line: the parser's problem and its column."""
    mark = getattr(e, "problem_mark", None)
    return f"{getattr(e, 'problem', None) or e}" + (f" at column {mark.column + 1}" if mark is not None else "")


def yaml_dict(value: Any) -> Dict[str, Any]:
    """Parse a YAML/JSON mapping given on the command line (``--encoder_conf "{a: 1}"``).

    Raises:
        argparse.ArgumentTypeError: if the value is not YAML (one line: the parser's problem and
            column) or not a mapping.
    """
    if isinstance(value, dict):
        return value
    try:
        out = yaml.load(value, Loader=UniqueKeyLoader) if value else {}
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"not a YAML mapping: {value!r}: {_yaml_problem(e)}") from None
    if out is None:
        return {}
    if not isinstance(out, dict):
        raise argparse.ArgumentTypeError(f"expected a mapping, got {value!r}")
    return out


def bool_or_int(value: str) -> Union[bool, int]:
    """Parse ``true``/``false`` (as :func:`str2bool`) or a whole number (``3``), e.g. ``--freeze_encoder``.

    Raises:
        argparse.ArgumentTypeError: for any other string.
    """
    if str(value).strip().lstrip("+-").isdigit():
        return int(value)
    try:
        return str2bool(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected true, false or a whole number, got {value!r}") from None


def float_or_none(value: str) -> Optional[float]:
    """Parse a float, or ``none``/``null`` to ``None``."""
    if str(value).strip().lower() in ("none", "null", ""):
        return None
    return float(value)


#: argparse ``type`` of each option field annotation (see :func:`add_options`).
OPTION_TYPES = {
    int: int, float: float, str: str, bool: str2bool,
    Optional[int]: int_or_none, Optional[float]: float_or_none, Optional[str]: str_or_none,
    Dict[str, Any]: yaml_dict, Union[bool, int]: bool_or_int,
}

Options = TypeVar("Options")


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one ``--<name>`` option per field of the dataclass ``cls``, in field order.

    Each field's metadata (see :func:`captionlib.train.options.option`) gives its help
    text, argparse group and choices; its annotation gives the parser (:data:`OPTION_TYPES`:
    ``bool`` takes true/false, ``Optional[...]`` also takes none, a mapping takes YAML or
    ``key=value`` items, see :func:`parse_args`).

    Raises:
        TypeError: a field of an annotation without a parser.
    """
    hints = typing.get_type_hints(cls)
    groups: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if hints[f.name] not in OPTION_TYPES:
            raise TypeError(f"{cls.__name__}.{f.name}: no command-line parser for {hints[f.name]}")
        name = f.metadata.get("group")
        if name and name not in groups:
            groups[name] = parser.add_argument_group(name)
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        kw = {"choices": f.metadata["choices"]} if f.metadata.get("choices") else {}
        (groups[name] if name else parser).add_argument(
            f"--{f.name}", type=OPTION_TYPES[hints[f.name]], default=default, help=f.metadata.get("help"), **kw)


def required_options(cls: type) -> List[str]:
    """The fields of the dataclass ``cls`` marked ``required`` (for :func:`parse_args`)."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("required")]


def options_from_args(cls: Type[Options], args: argparse.Namespace) -> Options:
    """The dataclass ``cls`` filled from parsed ``args`` (other attributes are ignored)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def in_range(value: float, valid: str) -> bool:
    """Whether ``value`` lies in the range ``valid`` (see :func:`captionlib.train.options.option`).

    Raises:
        ValueError: a range that is not one of the forms of :func:`captionlib.train.options.option`.
    """
    m = re.fullmatch(r"\s*(>=|>)\s*(\S+)\s*", valid)
    if m:
        return value >= float(m[2]) if m[1] == ">=" else value > float(m[2])
    m = re.fullmatch(r"\s*([\[(])\s*(\S+)\s*,\s*(\S+)\s*([\])])\s*", valid)
    if not m:
        raise ValueError(f"bad range {valid!r}")
    lo, hi = float(m[2]), float(m[3])
    return (value >= lo if m[1] == "[" else value > lo) and (value <= hi if m[4] == "]" else value < hi)


def check_options(opts: Any) -> None:
    """Check every field of an options dataclass against its ``choices`` and ``valid``
    range, before anything is loaded, so that a bad setting is one line naming the key.

    Raises:
        ValueError: ``<key> must be <range>, got <value>`` (or ``one of ...``) for the first
            bad field.
    """
    for f in dataclasses.fields(opts):
        value, choices, valid = getattr(opts, f.name), f.metadata.get("choices"), f.metadata.get("valid")
        if choices and value not in choices:
            raise ValueError(f"{f.name} must be one of {', '.join(map(str, choices))}, got {value!r}")
        if valid and value is not None and not in_range(value, valid):
            shown = f"in {valid}" if valid[0] in "[(" else valid
            raise ValueError(f"{f.name} must be {shown}, got {value!r}")


def _typed_value(value: Any, hint: Any, key: str) -> Any:
    """``value`` of a mapping option's key, checked against the field annotation ``hint``
    (``bool``, ``int``, ``float`` (an int is taken), ``str``, ``Optional[...]`` of them).

    Raises:
        ValueError: ``<key> must be a <type>, got <value>``.
    """
    if value is None and typing.get_origin(hint) is Union and type(None) in typing.get_args(hint):
        return None
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool), str: isinstance(value, str)}
    if not ok.get(base, True):
        raise ValueError(f"{key} must be a{'n' if base is int else ''} {base.__name__}, got {value!r}")
    return float(value) if base is float else value


def options_from_mapping(cls: Type[Options], mapping: Optional[Dict[str, Any]], name: str) -> Options:
    """The options dataclass ``cls`` filled from the YAML mapping of a ``*_conf`` option (e.g.
    ``rl_conf``, see :func:`captionlib.rl.check_rl_options`), each value checked against its
    field's type, choices and range (:func:`check_options`); keys left out take the defaults.

    Args:
        cls: a dataclass of :func:`captionlib.train.options.option` fields.
        mapping: the option's value (``None`` or ``{}``: all defaults).
        name: what the errors name the mapping by, e.g. ``"rl_conf (rl_algo sle)"``.

    Raises:
        ValueError: one line naming ``name``: an unknown key (with the valid keys), or a
            value of the wrong type, outside its choices or its range.
    """
    fields = [f.name for f in dataclasses.fields(cls)]
    mapping = dict(mapping or {})
    unknown = [k for k in mapping if k not in fields]
    if unknown:
        raise ValueError(f"{name}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                         f"its keys: {', '.join(fields) or '(none)'}")
    hints = typing.get_type_hints(cls)
    try:
        opts = cls(**{k: _typed_value(v, hints[k], k) for k, v in mapping.items()})
        check_options(opts)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    return opts


def options_help(cls: type, title: str) -> str:
    """The keys of a ``*_conf`` options dataclass ``cls`` as a ``--help`` section headed ``title``:
    one line per key with its type, default, choices or range, and help text."""
    hints = typing.get_type_hints(cls)
    lines = [f"{title}:"]
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        hint = hints[f.name]
        base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        extra = (f"; one of {', '.join(map(str, f.metadata['choices']))}" if f.metadata.get("choices")
                 else f"; {f.metadata['valid']}" if f.metadata.get("valid") else "")
        lines.append(f"  {f.name} ({getattr(base, '__name__', base)}, default {default!r}{extra}): "
                     f"{f.metadata.get('help', '')}")
    return "\n".join(lines)


def parse_options(parser: configargparse.ArgumentParser, cls: Type[Options], cmd: Optional[Sequence[str]] = None,
                  check: Union[None, str, Callable[[Options], Any]] = None) -> Options:
    """Parse a binary's command line (:func:`parse_args`, with the ``required`` fields of the
    options dataclass ``cls``) into a ``cls`` and check it before anything is loaded: with
    ``check``, the binary's own checks (which run :func:`check_options` first, e.g.
    :func:`captionlib.rl.check_rl_options`), else :func:`check_options`; a bad value exits 2 with
    one line naming the key. With the field ``check_only`` set, a valid command line exits 0 here
    (the recipes check stage 5's and 6's options before stage 1). ``check`` may be named as
    ``"package.module.function"``, imported only once the command line parsed (so that
    ``--help`` of a binary whose checks import torch loads no torch)."""
    opts = options_from_args(cls, parse_args(parser, cmd, required_options(cls)))
    if isinstance(check, str):
        module, _, name = check.rpartition(".")
        check = getattr(importlib.import_module(module), name)
    try:
        (check or check_options)(opts)
    except ValueError as e:
        parser.error(str(e))
    if getattr(opts, "check_only", False):
        logging.info("the options are valid (--check_only true): nothing loaded or written")
        sys.exit(0)
    return opts


def get_commandline_args() -> str:
    """Return the current process's command line, shell-quoted, for the first log line."""
    return " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger with the project-wide format (ESPnet's).

    Under ``torchrun`` (``WORLD_SIZE`` > 1) every line starts with ``[<host>:rank R/W]``,
    and ranks other than 0 log warnings and errors only (as ESPnet2 does).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    fmt = LOG_FORMAT
    if world > 1:
        rank = int(os.environ.get("RANK", "0"))
        fmt = f"[{socket.gethostname().split('.')[0]}:rank {rank}/{world}] {LOG_FORMAT}"
        if rank > 0:
            level = "WARNING"
    logging.basicConfig(level=getattr(logging, str(level).upper()), format=fmt, force=True)


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects a mapping with a repeated key (PyYAML keeps the last
    one silently).

    Raises:
        yaml.constructor.ConstructorError: naming the key, file, line and column.
    """

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


# YAML 1.2's floats: PyYAML (YAML 1.1) reads 1e-4 and 1E5 (no dot) as strings, which a float
# option converts but a mapping's value (encoder_conf: {dropout: 1e-1}) kept as a string
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


class StrictYAMLConfigFileParser(configargparse.YAMLConfigFileParser):
    """configargparse's YAML config parser with :class:`UniqueKeyLoader`, which keeps what its
    base class lost: a mapping (``encoder_conf:``) is passed on as YAML instead of Python's
    ``str()`` of it (which made ``1e-05`` a string and ``None`` the string 'None'), and a key
    without a value (``lr:``, ``beam_size: null``) is left out as before (the option's default:
    right where that is ``None``, as in the configs ``--print_config`` writes) but recorded in
    :attr:`null_keys`, so that :func:`parse_args` refuses it where the default is something
    else (a forgotten value used to become the default silently).
    """

    def __init__(self):
        super().__init__()
        #: ``(config file, key)`` of every key without a value, in the files parsed so far
        self.null_keys: List[Tuple[str, str]] = []

    def parse(self, stream):
        """``{key: value}`` of a YAML config, as configargparse hands them to argparse.

        Raises:
            configargparse.ConfigFileParserException: a YAML error (its message names the file
                and line), a key given twice, or a file that is not a mapping.
        """
        try:
            raw = yaml.load(stream, Loader=UniqueKeyLoader)
        except Exception as e:  # the base class's wrapping: configargparse reports it as a usage error
            raise configargparse.ConfigFileParserException(f"Couldn't parse config file: {e}") from None
        if not isinstance(raw, dict):
            raise configargparse.ConfigFileParserException(
                f"the config file {getattr(stream, 'name', 'stream')} does not hold 'key: value' pairs (a YAML "
                f"mapping): it holds {type(raw).__name__}")
        out = {}
        for key, value in raw.items():
            if value is None:
                self.null_keys.append((getattr(stream, "name", "config"), key))
            elif isinstance(value, dict):
                out[key] = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=2 ** 31).strip()
            elif isinstance(value, list):
                out[key] = value
            else:
                out[key] = str(value)
        return out


class ArgumentParser(configargparse.ArgumentParser):
    """configargparse's parser that refuses NaN and infinity in float options, and whose usage
    errors name the config file of the key they are about: ``train.yaml: argument --lr:
    invalid float value: 'abc'`` rather than a message about an option that is on no command
    line, and ``unrecognized arguments: --lrr=1`` becomes ``train.yaml: unknown key 'lrr'``."""

    def parse_known_args(self, args=None, namespace=None, **kwargs):
        """configargparse's parse, then a float option holding NaN or infinity is an error:
        ``lr: .inf`` passed every ``> 0`` check and trained nothing (checked here, after
        parsing, so that every ``type=float`` option of every binary is covered)."""
        namespace, unknown = super().parse_known_args(args, namespace, **kwargs)
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            if isinstance(value, float) and not math.isfinite(value) and action.option_strings:
                self.error(f"argument {action.option_strings[-1]}: expected a finite number, got '{value}'")
        return namespace, unknown

    def config_key_files(self) -> Dict[str, str]:
        """``{key: config file}`` of the keys the last parse took from config files (a key given
        on the command line as well is not among them)."""
        out: Dict[str, str] = {}
        for source, settings in self.get_source_to_settings_dict().items():
            kind, _, label = source.partition("|")
            if kind == "config_file":
                for key in settings:
                    out.setdefault(str(key), label)
        return out

    def error(self, message: str):
        """Exit 2 with the usage and ``message``, prefixed with the config file of its key."""
        super().error(self.locate(message))

    def locate(self, message: str) -> str:
        """A usage error's ``message`` with the config file of its key named (see the class)."""
        files = self.config_key_files()
        m = re.match(r"argument --(\w+)|(\w+) must be ", message)
        key = m and (m[1] or m[2])
        if key in files:
            message = f"{files[key]}: {message}"
        elif message.startswith("unrecognized arguments: "):
            words = message[len("unrecognized arguments: "):].split()
            keys = [(w, w[2:].split("=", 1)[0]) for w in words]
            unknown = [self.moved_message(k, w.partition("=")[2], files[k]) or f"{files[k]}: unknown key {k!r}"
                       for w, k in keys if w.startswith("--") and k in files]
            rest = [w for w, k in keys if not (w.startswith("--") and k in files)]
            moved = [self.moved_message(w[2:].partition("=")[0], w.partition("=")[2]
                                        or (rest[i + 1] if i + 1 < len(rest) else "..."))
                     for i, w in enumerate(rest) if w.startswith("--")]
            unknown += [m for m in moved if m]
            if not any(moved):
                unknown += [f"unrecognized arguments: {' '.join(rest)}"] if rest else []
            message = "; ".join(unknown)
        return message

    #: ``{old key: (mapping option, its key there)}``: options that moved into a ``*_conf`` mapping
    #: (e.g. ``num_samples`` into ``rl_conf``); a binary sets it, and an old key given at the top
    #: level is refused with where it goes now (:meth:`moved_message`).
    moved_keys: Dict[str, Tuple[str, str]] = {}

    def moved_message(self, key: str, value: str, config_file: Optional[str] = None) -> Optional[str]:
        """The error for an old top-level ``key`` (of :attr:`moved_keys`) given with ``value``, naming
        where it goes now: ``train.yaml: key 'num_samples' moved into rl_conf: write 'rl_conf: {num_samples:
        5}'`` (or ``--rl_conf num_samples=5`` on the command line); ``None`` for any other key."""
        if key not in self.moved_keys:
            return None
        option, new = self.moved_keys[key]
        if config_file:
            return f"{config_file}: key {key!r} moved into {option}: write '{option}: {{{new}: {value}}}'"
        return f"--{key} moved into --{option}: give it as --{option} {new}={value}"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that appends ``(default: ...)`` to an option's help, unless the help
    already says its default (``"(default: packed)"``): each option shows one default; the
    description and epilog keep their line breaks."""

    def _fill_text(self, text, width, indent):
        """A description or epilog wrapped line by line: its line breaks are kept (the lines of an
        ``rl_conf`` key list), a long line continues indented."""
        return "\n".join(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent + "    ")
                         for line in text.splitlines())

    def _get_help_string(self, action):
        help_text = action.help or ""
        if re.search(r"\(default\b", help_text, re.IGNORECASE):
            return help_text
        return super()._get_help_string(action)


def command_name(argv0: Optional[str] = None) -> str:
    """The name a binary was invoked by, for its usage line and errors: ``caption_infer`` for the
    console script ``tools/venv/bin/caption_infer``, ``python -m captionbin.caption_infer`` for
    ``python -m``, else the script's file name without ``.py``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and argv0.endswith(".py") and (
            main_spec.name.startswith("captionbin.") or os.path.basename(argv0) == "__main__.py"):
        return f"python -m {main_spec.name.removesuffix('.__main__')}"
    name = os.path.basename(argv0) or "captionbin"
    return name[:-3] if name.endswith(".py") else name


def get_base_parser(description: str, prog: Optional[str] = None) -> configargparse.ArgumentParser:
    """Create a parser with ``--config`` (YAML), ``--print_config`` and ``--log_level``.

    Args:
        description: shown by ``--help``.
        prog: the command named by the usage line (default: :func:`command_name`).

    Returns:
        An :class:`ArgumentParser` whose YAML keys use underscores; options are never
        abbreviated, a YAML key given twice is an error, and an error about a key of the
        config file names the file. ``--help`` shows each option's default once
        (:class:`HelpFormatter`) and none of configargparse's boilerplate about config files
        (the ``--config`` help says what they are).
    """
    parser = ArgumentParser(
        prog=prog or command_name(),
        description=description,
        config_file_parser_class=StrictYAMLConfigFileParser,
        formatter_class=HelpFormatter,
        allow_abbrev=False,  # a truncated key (n_mel) must not be taken as another (n_mels)
        add_config_file_help=False,  # its text links to a site unrelated to captionlib
        add_env_var_help=False,
    )
    parser.add_argument("--config", is_config_file=True,
                        help="YAML config: a mapping of option names without '--' (lr: 0.001); the command "
                             "line overrides it, and it overrides the defaults")
    parser.add_argument(
        "--print_config", action="store_true", help="print the resolved config as YAML and exit"
    )
    parser.add_argument(
        "--log_level",
        default="INFO",
        choices=("ERROR", "WARNING", "INFO", "DEBUG"),
        help="logging level",
    )
    return parser


_KEY_VALUE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)=(.*)", re.DOTALL)


def _key_value_updates(parser: argparse.ArgumentParser,
                       cmd: Sequence[str]) -> Tuple[List[str], List[Tuple[str, str, str, str]]]:
    """Take the ``--<mapping option> key=value`` items (ESPnet's ``--encoder_conf
    num_blocks=6``) out of a command line.

    Returns:
        ``(the other words, [(dest, option, key path, value)])``, in command-line order.
    """
    options = {o: a.dest for a in parser._actions if a.type is yaml_dict for o in a.option_strings}
    rest, updates, i = [], [], 0
    while i < len(cmd):
        option, eq, inline = cmd[i].partition("=")
        if option not in options or not (eq or i + 1 < len(cmd)):
            rest.append(cmd[i])
            i += 1
            continue
        used = cmd[i:i + 1] if eq else cmd[i:i + 2]
        m = _KEY_VALUE.fullmatch(inline if eq else used[1])
        if m:
            updates.append((options[option], option, m[1], m[2]))
        else:
            rest += used
        i += len(used)
    return rest, updates


def _apply_key_values(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      updates: Sequence[Tuple[str, str, str, str]]) -> None:
    """Set each ``key.path=value`` (the value read as YAML) in its mapping option of ``args``
    (copied: the config's mapping or the default), nested mappings made where missing."""
    for dest, option, path, value in updates:
        conf = copy.deepcopy(getattr(args, dest) or {})
        node, *keys = [conf] + path.split(".")
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        try:
            node[keys[-1]] = yaml.load(value, Loader=UniqueKeyLoader)
        except yaml.YAMLError as e:  # not ArgumentParser.error: no config file to name
            argparse.ArgumentParser.error(parser, f"argument {option}: {path}={value}: the value is not YAML: "
                                                  f"{_yaml_problem(e)}")
        setattr(args, dest, conf)


def parse_args(
    parser: configargparse.ArgumentParser,
    cmd: Optional[Sequence[str]] = None,
    required: Sequence[str] = (),
) -> argparse.Namespace:
    """Parse strictly (unknown keys in the YAML or on the command line are errors).

    A mapping option (``--encoder_conf``) takes a YAML mapping, which replaces the config's,
    or ``key=value`` items (repeatable; ``key.sub=value`` for a nested key; the value is read
    as YAML, with 1e-4 a float: ``no`` is False, ``0x10`` 16), which update the mapping of the
    config (or of a ``--encoder_conf '{...}'``, or the default) key by key, as ESPnet's
    ``NestedDictAction`` does: ``--decoder_conf dropout=0.5`` keeps the config's other decoder
    keys. Unlike ESPnet's, the items apply after any mapping given, whatever their order.

    Handles ``--print_config``: prints the resolved options as YAML and exits 0.
    Then checks the ``required`` options (checked here rather than by argparse so that
    ``--print_config`` works alone; a missing one exits 2 with a usage message), sets up
    logging at ``--log_level``, makes SIGTERM exit cleanly when ``cmd`` is ``None`` (the
    process's own command line: :func:`exit_on_sigterm`) and logs the command line.
    """
    config_parser = getattr(parser, "_config_file_parser", None)
    if isinstance(config_parser, StrictYAMLConfigFileParser):
        config_parser.null_keys.clear()
    given = list(sys.argv[1:] if cmd is None else cmd)
    words, updates = _key_value_updates(parser, given)
    args = parser.parse_args(words)
    _apply_key_values(parser, args, updates)
    for path, key in getattr(config_parser, "null_keys", ()):
        dest = str(key).lstrip("-").replace("-", "_")
        default = parser.get_default(dest)
        on_command_line = any(a == f"--{dest}" or a.startswith(f"--{dest}=") for a in given)
        if default is not None and not on_command_line and getattr(args, dest, None) == default:
            parser.error(f"{path}: key {key!r} has no value (null): write its value, or leave the key out for "
                         f"the default {default!r}")
    if args.print_config:
        print(yaml.safe_dump(config_dict(args), sort_keys=False), end="")
        sys.exit(0)
    missing = [f"--{k}" for k in required if getattr(args, k) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    setup_logging(args.log_level)
    if cmd is None:  # a process of its own (python -m captionbin.X), not a caller's main([...])
        exit_on_sigterm()
    logging.info(get_commandline_args())
    return args


def _raise_exit(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """Make SIGTERM (a cluster's preemption or time limit: SLURM sends it before SIGKILL;
    ``timeout``; ``run.pl`` stopping its jobs) end the process as Ctrl-C does, by raising
    ``SystemExit(143)``: ``finally`` blocks run, so the experiment dir's ``.lock`` and the
    temporary files of unfinished writes are removed, and a requeued job, on this node or
    another, can resume. Python's default lets the signal kill the process with both left.
    Called by :func:`parse_args` for a process's own command line; does nothing outside the
    main thread (where signal handlers cannot be set)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_exit)


def config_dict(args: argparse.Namespace) -> Dict[str, Any]:
    """Resolved options as a plain dict (without ``config``/``print_config``), for config.yaml."""
    return {k: v for k, v in vars(args).items() if k not in ("config", "print_config")}


def run_refusing_unsafe_files(train: Callable[[Any], Any], opts: Any) -> Any:
    """``train(opts)``, where a file refused because loading it could run code (an
    :class:`~captionlib.utils.fileio.UnsafeFileError`: a crafted ``--init_param`` or
    ``latest.pth``) ends the process with that one-line refusal (logged as an error), exit 1,
    as the loaders of the other binaries do.

    Raises:
        SystemExit: 1, after such a refusal.
    """
    from captionlib.utils.fileio import UnsafeFileError

    try:
        return train(opts)
    except UnsafeFileError as e:
        logging.error("%s", e)
        sys.exit(1)
