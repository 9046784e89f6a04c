"""Checking a ``torch.export`` program file (``.pt2``) before ``torch.export.load`` reads it, so
that loading a file someone gave us runs no code from it.

``torch.export.load`` (torch 2.13) runs code from the file along several routes:

* it unpickles with ``weights_only=False`` the example inputs (``data/sample_inputs/*.pt``)
  when the safe load of them fails, a weight or constant marked ``use_pickle`` in its payload
  config, and the legacy ``data/weights/<model>.pt`` / ``data/constants/<model>.pt`` members;
  constants may also be custom or opaque objects, unpickled as such;
* an ``data/aotinductor/`` member is a compiled shared library that it loads;
* each symbolic-shape expression (``expr_str``) is parsed by ``sympy.sympify``, which
  evaluates the string as Python;
* each string of ``guards_code`` is pasted into Python source that is ``exec``-ed when the
  module is made, and run at every call;
* a graph node's target is resolved by attribute lookup from ``torch``, ``math`` or
  ``operator`` (``torch.serialization.os.system`` resolves), and called at every call.

:func:`check_exported_program` accepts only the subset of the format that
``torch.export.save`` writes for a plain program of ATen operators (what
``caption_export_cnn`` writes): the members it writes, raw tensor payloads, example inputs
that ``torch.load(weights_only=True)`` reads, expressions and guards made of a fixed set of
sympy / arithmetic terms (checked on their Python syntax tree), and ATen, prims or arithmetic
targets. Anything else is refused before ``torch.export.load`` sees the file, with one line
naming the file and the member. Reference: PyTorch ``torch/export/pt2_archive/_package.py``
and ``torch/_export/serde/serialize.py``, ``torch/export/_unlift.py`` (2.13).
"""

import ast
import io
import json
import re
import zipfile
from typing import Any, Dict, Iterator, Tuple

import torch

from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES, member_sizes, read_member
from captionlib.utils.fileio import refused_globals

MODEL_JSON = "models/model.json"
WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
SAMPLE_INPUTS = "data/sample_inputs/model.pt"
#: the members (below the archive's root folder) of a plain program, as torch.export.save writes them
_PLAIN_MEMBERS = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id",
                  MODEL_JSON, WEIGHTS_CONFIG, CONSTANTS_CONFIG, SAMPLE_INPUTS}
_PAYLOAD_MEMBER = re.compile(r"data/weights/weight_\d+|data/constants/tensor_\d+|extra/[^/]+")
#: why a known member that torch.export.load reads unsafely is refused
_UNSAFE_MEMBERS = (
    ("data/aotinductor/", "an AOTInductor compiled library, which loading would run"),
    ("data/weights/model.pt", "a legacy pickled weights file, which torch unpickles with weights_only=False"),
    ("data/constants/model.pt", "a legacy pickled constants file, which torch unpickles with weights_only=False"),
    ("data/constants/custom_obj_", "a pickled custom object, which loading would run"),
    ("data/constants/opaque_obj_", "a pickled opaque object, which loading would run"),
)
#: callables a symbolic-shape expression may name: sympy's and torch.utils._sympy.functions'
_SYMPY_CALLS = frozenset(
    "Symbol Integer Rational Float Add Mul Pow Max Min Mod Abs Eq Ne Lt Le Gt Ge And Or Not "
    "FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural "
    "FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt "
    "RoundDecimal ToFloat Identity".split())
_SYMPY_NAMES = frozenset({"oo", "zoo", "nan", "true", "false", "pi", "E"})
_SYMPY_KEYWORDS = frozenset({"positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite",
                             "nonzero", "zero", "even", "odd", "evaluate"})
_SYMBOL_NAME = re.compile(r"[a-z]+[0-9]+")  # torch's shape symbols: s0, u3, ...
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not,
               ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_GUARD_CALLS = frozenset({"max", "min", "abs"})
_TENSOR_METHODS = frozenset({"size", "stride", "storage_offset", "dim"})
_TARGET = re.compile(
    r"torch\.ops\.(aten|prims)\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*"
    r"|_operator\.(getitem|add|sub|mul|truediv|floordiv|mod|neg|pos|pow|eq|ne|lt|le|gt|ge|and_|or_|not_|abs)"
    r"|math\.(ceil|floor|sqrt|trunc)|torch\.(sym_max|sym_min|sym_float|sym_int|sym_not|sym_ite|sym_sum|_sym_sqrt)")
_FQN = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")
_FQN_KEYS = frozenset({"parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name", "fqn"})


def _literal_ok(node: ast.AST) -> bool:
    """Whether ``node`` is a number, a bool or None (``-`` included)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int, float)))


def _sympy_ok(node: ast.AST) -> bool:
    """Whether ``node`` (of an ``expr_str``) is made of sympy calls, symbol names and numbers."""
    if _literal_ok(node):
        return True
    if isinstance(node, ast.Constant):  # a symbol's name, e.g. Symbol('s0', ...)
        return isinstance(node.value, str) and _SYMBOL_NAME.fullmatch(node.value) is not None
    if isinstance(node, ast.Name):
        return node.id in _SYMPY_NAMES or node.id in _SYMPY_CALLS or _SYMBOL_NAME.fullmatch(node.id) is not None
    if isinstance(node, ast.Call):
        return (isinstance(node.func, ast.Name) and node.func.id in _SYMPY_CALLS
                and all(_sympy_ok(a) for a in node.args)
                and all(k.arg in _SYMPY_KEYWORDS and _literal_ok(k.value) for k in node.keywords))
    return _arithmetic_ok(node, _sympy_ok)


def _arithmetic_ok(node: ast.AST, leaf_ok) -> bool:
    """Whether ``node`` is an arithmetic, comparison or boolean operation over ``leaf_ok`` terms."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _ARITHMETIC) and leaf_ok(node.left) and leaf_ok(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, _ARITHMETIC) and leaf_ok(node.operand)
    if isinstance(node, ast.BoolOp):
        return isinstance(node.op, _ARITHMETIC) and all(leaf_ok(v) for v in node.values)
    if isinstance(node, ast.Compare):
        return all(isinstance(op, _ARITHMETIC) for op in node.ops) and all(
            leaf_ok(v) for v in [node.left] + node.comparators)
    return False


def _input_ok(node: ast.AST) -> bool:
    """Whether ``node`` is ``L['<name>']``, a program input as guards name it."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "L"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
            and node.slice.value.isidentifier())


def _guard_ok(node: ast.AST) -> bool:
    """Whether ``node`` (of a guard) is arithmetic over numbers, ``max``/``min``/``abs`` and the
    inputs' ``size()``, ``stride()`` (indexed by a number), ``storage_offset()`` and ``dim()``."""
    if _literal_ok(node):
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return isinstance(node.slice.value, int) and _guard_ok(node.value)
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Name):
            return func.id in _GUARD_CALLS and all(_guard_ok(a) for a in node.args)
        return (isinstance(func, ast.Attribute) and func.attr in _TENSOR_METHODS and _input_ok(func.value)
                and all(_literal_ok(a) for a in node.args))
    return _arithmetic_ok(node, _guard_ok)


def _expression(text: Any, what: str, node_ok) -> None:
    """Raise ValueError naming ``what`` unless ``text`` is one Python expression whose syntax
    tree ``node_ok`` accepts (no comments, line breaks or backslashes either)."""
    if not isinstance(text, str) or len(text) > 10000 or any(c in text for c in "#\n\r\\;"):
        raise ValueError(f"{what} {text!r:.120} is not an expression torch.export.save writes")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"{what} {text!r:.120} is not an expression") from None
    if not node_ok(tree.body):
        raise ValueError(f"{what} {text!r:.120} holds more than arithmetic on shapes (loading would evaluate it)")


def _walk(value: Any) -> Iterator[Tuple[str, Any, Any]]:
    """``(key, value, parent)`` of every mapping entry in a JSON value, depth first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                yield k, v, item
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)


def _check_program_json(program: Any) -> None:
    """Raise ValueError unless the serialized program's expressions, guards, node targets and
    names are of the plain kind (see the module docstring)."""
    if not isinstance(program, dict) or not isinstance(program.get("graph_module"), dict):
        raise ValueError("is not a serialized ExportedProgram")
    guards = program.get("guards_code") or []
    if not isinstance(guards, list):
        raise ValueError("guards_code is not a list")
    for guard in guards:
        _expression(guard, "guard", _guard_ok)
    for key, value, parent in _walk(program):
        if key == "expr_str":
            _expression(value, "symbolic expression", _sympy_ok)
        elif key == "target" and "inputs" in parent:
            if not isinstance(value, str) or _TARGET.fullmatch(value) is None:
                raise ValueError(f"graph node target {value!r:.120} is not an ATen, prims or arithmetic operator")
        elif key in _FQN_KEYS and value not in ("", None):
            if not isinstance(value, str) or _FQN.fullmatch(value) is None:
                raise ValueError(f"{key} {value!r:.120} is not a dotted name")


def _check_payload_config(config: Any, directory: str, prefix: str, members: Dict[str, int]) -> None:
    """Raise ValueError unless every entry of a weights or constants payload config is a raw
    tensor (no ``use_pickle``) in a member ``<directory><prefix>N`` that the archive holds."""
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise ValueError("is not a payload config")
    for fqn, meta in entries.items():
        path = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(path, str) or not path.startswith(prefix) or not path[len(prefix):].isdigit():
            raise ValueError(f"entry {fqn!r:.120} is not a raw tensor ({path!r:.80}); loading it would unpickle")
        if meta.get("use_pickle") is not False:
            raise ValueError(f"entry {fqn!r:.120} is marked use_pickle, which torch unpickles with "
                             f"weights_only=False")
        if directory + path not in members:
            raise ValueError(f"entry {fqn!r:.120} names {directory + path}, which the archive lacks")


def _check_sample_inputs(data: bytes, what: str) -> None:
    """Raise ValueError starting with ``what`` unless ``torch.load(weights_only=True)`` reads
    ``data``: otherwise ``torch.export.load`` would retry with ``weights_only=False``."""
    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # what the unpickler raises varies: any failure means torch would fall back
        refused = refused_globals(io.BytesIO(data), str(e))
        reason = f"it needs {', '.join(refused)}" if refused else f"{type(e).__name__}"
        raise ValueError(f"{what}: torch.load(weights_only=True) refuses it ({reason}), and torch.export.load "
                         f"would then unpickle it with weights_only=False; nothing was loaded") from None


def _archive_members(z: zipfile.ZipFile, name: str, max_bytes: int) -> Tuple[str, Dict[str, int]]:
    """``(root folder, {member below it: size})``, refusing members outside the plain layout."""
    sizes = member_sizes(z, name, max_bytes)
    roots = {n.split("/", 1)[0] for n in sizes}
    if len(roots) != 1 or any("/" not in n for n in sizes):
        raise ValueError(f"{name} is not a torch.export program (.pt2): its members are not in one root folder")
    root = roots.pop()
    members = {n[len(root) + 1:]: size for n, size in sizes.items()}
    for member in members:
        for start, why in _UNSAFE_MEMBERS:
            if member.startswith(start):
                raise ValueError(f"{name}: refused member {root}/{member}: {why}; nothing was loaded")
        if member not in _PLAIN_MEMBERS and _PAYLOAD_MEMBER.fullmatch(member) is None:
            raise ValueError(f"{name}: refused member {root}/{member}: not one torch.export.save writes for a "
                             f"plain program; nothing was loaded")
    for member in (MODEL_JSON, WEIGHTS_CONFIG, SAMPLE_INPUTS):
        if member not in members:
            raise ValueError(f"{name} is not a torch.export program (.pt2): it lacks {root}/{member}")
    return root, members


def check_exported_program(data: bytes, name: str, max_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> None:
    """Check that ``torch.export.load`` of the ``.pt2`` archive ``data`` runs no code from it.

    Args:
        data: the file's bytes.
        name: how messages name the file.
        max_bytes: cap on the summed size of its members, in bytes.

    Raises:
        ValueError: one line naming ``name`` and the refused member: not a zip archive; members
            over the cap; a member outside the plain layout (AOTInductor libraries, legacy
            pickles, custom or opaque objects); a ``use_pickle`` weight or constant; example
            inputs that ``torch.load(weights_only=True)`` refuses; a symbolic expression, guard
            or graph-node target outside the plain kind (module docstring).
    """
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ValueError(f"{name} is not a torch.export program (.pt2): not a zip archive") from None
    with z:
        root, members = _archive_members(z, name, max_bytes)

        def read(member: str) -> bytes:
            return read_member(z, f"{root}/{member}", members[member], name)

        for member, directory, prefix in ((WEIGHTS_CONFIG, "data/weights/", "weight_"),
                                          (CONSTANTS_CONFIG, "data/constants/", "tensor_")):
            if member in members:
                try:
                    _check_payload_config(json.loads(read(member)), directory, prefix, members)
                except (ValueError, AttributeError) as e:  # json's errors are ValueErrors
                    raise ValueError(f"{name}: refused member {root}/{member}: {e}; nothing was loaded") from None
        _check_sample_inputs(read(SAMPLE_INPUTS), f"{name}: refused member {root}/{SAMPLE_INPUTS}")
        try:
            _check_program_json(json.loads(read(MODEL_JSON)))
        except ValueError as e:
            raise ValueError(f"{name}: refused member {root}/{MODEL_JSON}: {e}; nothing was loaded") from None
