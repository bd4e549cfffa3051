"""The exception classes follow the native table of codes, and the stubs list every one."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import yuebing
from yuebing import _native

PACKAGE = Path(yuebing.__file__).parent


def test_one_class_per_code_with_its_code_and_name():
    table = _native.error_codes()
    assert len(table) > 60
    for code, name in table:
        cls = getattr(yuebing, name)
        assert issubclass(cls, yuebing.YuebingError)
        assert (cls.code, cls.name) == (code, name)
        assert yuebing.ERRORS_BY_CODE[code] is cls
    assert (yuebing.ObjectNotFound.code, yuebing.ObjectAlreadyExists.code) == (-704, -705)
    assert (yuebing.ObjectHasLease.code, yuebing.InvalidParams.code) == (-706, -600)
    assert (yuebing.Timeout.code, yuebing.Canceled.code, yuebing.Forked.code) == (-4004, -4003, -4005)


def test_families_and_builtin_bases():
    assert issubclass(yuebing.ObjectNotFound, KeyError)
    assert issubclass(yuebing.InvalidParams, ValueError)
    for t in (yuebing.StoreTimeout, yuebing.RpcTimeout, yuebing.TransferTimeout):
        assert issubclass(t, yuebing.Timeout) and issubclass(t, TimeoutError)
    assert issubclass(yuebing.TransferCanceled, yuebing.Canceled)


def test_instances_keep_message_code_and_name_through_pickle():
    e = yuebing.errors._exception(-704, "ObjectNotFound", 'object "k" not found')
    assert type(e) is yuebing.ObjectNotFound
    assert str(e) == 'object "k" not found'
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), back.code, back.name, str(back)) == (type(e), -704, "ObjectNotFound", str(e))
    unknown = yuebing.errors._exception(-9999, "Unknown", "?")
    assert type(unknown) is yuebing.YuebingError and unknown.code == -9999


def test_the_stub_lists_every_class_with_its_bases():
    tree = ast.parse((PACKAGE / "errors.pyi").read_text())
    stubbed = {
        node.name: [b.id for b in node.bases if isinstance(b, ast.Name)]
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    for name, cls in yuebing.ERRORS_BY_NAME.items():
        assert name in stubbed, f"errors.pyi lacks {name}"
        assert stubbed[name] == [b.__name__ for b in cls.__bases__], name
    assert set(stubbed) == set(yuebing.ERRORS_BY_NAME) | {"YuebingError"}


def test_the_native_stub_names_every_public_class_and_method():
    tree = ast.parse((PACKAGE / "_native.pyi").read_text())
    stubbed = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in ("Store", "Engine", "Buffer", "ObjectInfo", "Replicas", "Location", "BatchStatus", "TaskStatus"):
        cls = getattr(_native, name)
        methods = {m.name for m in stubbed[name].body if isinstance(m, ast.FunctionDef)}
        public = {m for m in dir(cls) if not m.startswith("_")}
        assert public <= methods, f"{name}: {public - methods} not in _native.pyi"
