"""Builders of crafted ``torch.export`` program files (``.pt2``): a real program written by
``export_backbone``, rewritten so that ``torch.export.load`` (torch 2.13) would run code from
it, each along one route (see :mod:`captionlib.visual.exported`). Each route creates the file
``marker`` when it runs: a test asserts that the marker does not exist afterwards.
"""

import io
import json
import zipfile
from pathlib import Path
from typing import Callable, Dict

import torch

from bad_inputs import CodeOnLoad

Members = Dict[str, bytes]


def _pickle(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save(CodeOnLoad(marker), buf)
    return buf.getvalue()


def _json(members: Members, name: str, change: Callable[[dict], None]) -> None:
    value = json.loads(members[name])
    change(value)
    members[name] = json.dumps(value).encode()


def _sample_inputs(m: Members, marker: Path) -> str:
    m["data/sample_inputs/model.pt"] = _pickle(marker)
    return "data/sample_inputs/model.pt"


def _use_pickle_weight(m: Members, marker: Path) -> str:
    def mark(config):
        entry = next(iter(config["config"].values()))
        entry["use_pickle"] = True
        m["data/weights/" + entry["path_name"]] = _pickle(marker)
    _json(m, "data/weights/model_weights_config.json", mark)
    return "data/weights/model_weights_config.json"


def _legacy_weights(m: Members, marker: Path) -> str:
    m["data/weights/model.pt"] = _pickle(marker)
    return "data/weights/model.pt"


def _legacy_constants(m: Members, marker: Path) -> str:
    m["data/constants/model.pt"] = _pickle(marker)
    return "data/constants/model.pt"


def _opaque_constant(m: Members, marker: Path) -> str:
    m["data/constants/opaque_obj_0"] = _pickle(marker)
    return "data/constants/opaque_obj_0"


def _aoti_library(m: Members, marker: Path) -> str:
    m["data/aotinductor/model/model.so"] = b"\x7fELF"  # a compiled library torch would load
    return "data/aotinductor/model/model.so"


def _touch_code(marker: Path) -> str:
    return f"__import__('pathlib').Path({str(marker)!r}).touch()"


def _shape_expression(m: Members, marker: Path) -> str:
    def inject(program):
        expr = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"]  # the batch size
        expr["expr_str"] = f"{_touch_code(marker)} or {expr['expr_str']}"
    _json(m, "models/model.json", inject)
    return "models/model.json"


def _guard(m: Members, marker: Path) -> str:
    _json(m, "models/model.json", lambda p: p["guards_code"].append(f"{_touch_code(marker)} is None"))
    return "models/model.json"


def _node_target(m: Members, marker: Path) -> str:
    def retarget(program):  # os.system, reached by attribute lookup from torch, called at every forward
        program["graph_module"]["graph"]["nodes"][0]["target"] = "torch.serialization.os.system"
    _json(m, "models/model.json", retarget)
    return "models/model.json"


#: route name -> function rewriting the members (names below the root folder) and returning the refused member
ROUTES = {
    "sample_inputs": _sample_inputs, "use_pickle_weight": _use_pickle_weight, "legacy_weights": _legacy_weights,
    "legacy_constants": _legacy_constants, "opaque_constant": _opaque_constant, "aoti_library": _aoti_library,
    "shape_expression": _shape_expression, "guard": _guard, "node_target": _node_target,
}
#: the routes by which torch.export.load (torch 2.13) does run the code: checked without our check
RUNS_CODE = ("sample_inputs", "use_pickle_weight", "legacy_weights", "shape_expression", "guard")


def craft_pt2(source: Path, output: Path, route: str, marker: Path) -> str:
    """Write ``output``: the ``.pt2`` ``source`` rewritten along ``route`` (a key of
    :data:`ROUTES`). Returns the refused member's full name in the archive."""
    with zipfile.ZipFile(source) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0]
        members = {n[len(root) + 1:]: z.read(n) for n in names}
    member = ROUTES[route](members, Path(marker))
    with zipfile.ZipFile(output, "w") as z:
        for name, data in members.items():
            z.writestr(f"{root}/{name}", data)
    return f"{root}/{member}"
