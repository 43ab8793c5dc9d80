"""No ``str`` where etj.api has an enum: every annotation in etj.api and etj.core (model
fields, dataclass fields, function and method parameters and returns) whose name is one of
``ENUM_NAMES`` carries the enum, never ``str`` or a ``Literal`` of its values.

The core compares enums, never text (``== Strategy.PARAMETER_SERVER.value``); the wire
keeps the strings (pydantic writes an enum by its value: ``make crds`` and the trainer
config show no change). Read from the annotations as written (``from __future__ import
annotations`` keeps them as text), so a name imported only for type checking counts too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator

import etj.api
import etj.core

# A name -> the enum of etj.api every annotation of that name must carry.
ENUM_NAMES = {
    "strategy": "Strategy",
    "role": "Role",
    "phase": "Phase",
    "restart_policy": "RestartPolicy",
    "clean_pod_policy": "CleanPodPolicy",
    "success_policy": "SuccessPolicy",
    "optimizer": "Optimizer",
    "default_optimizer": "Optimizer",
    "dtype": "Dtype",
    "gang": "GangScheduler",
    "gang_scheduler": "GangScheduler",
    "backend": "GangScheduler",
    "format": "FileFormat",
}
TEXT = re.compile(r"\bstr\b|\bLiteral\[")
# (module, owner, name): where a name of ENUM_NAMES is not the enum's, and why.
NOT_ENUMS = {
    # The gang object itself (a Workload or PodGroup manifest), not its backend.
    ("etj.core.render.scheduling", "gang_fingerprint", "gang"),
    ("etj.core.render.scheduling", "immutable_gang", "gang"),
    # A Kafka message is one csv row, no other format: the one value, not the enum.
    ("etj.api.spec.data", "KafkaData", "format"),
}


def _modules() -> Iterator[object]:
    for package in (etj.api, etj.core):
        yield package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield importlib.import_module(info.name)


def _annotations(module: object) -> Iterator[tuple[str, str, str]]:
    """(owner, name, annotation text) of every annotation defined in ``module``."""
    for owner_name, owner in vars(module).items():
        if getattr(owner, "__module__", None) != module.__name__:  # type: ignore[attr-defined]
            continue
        if inspect.isclass(owner):
            for name, text in inspect.get_annotations(owner).items():
                yield owner_name, name, str(text)
            for attr, member in owner.__dict__.items():
                func = getattr(member, "__func__", member)
                if inspect.isfunction(func):
                    for name, text in func.__annotations__.items():
                        yield f"{owner_name}.{attr}", name, str(text)
                elif isinstance(member, property) and member.fget is not None:
                    text = member.fget.__annotations__.get("return")
                    if text is not None:
                        yield owner_name, attr, str(text)
        elif inspect.isfunction(owner):
            for name, text in owner.__annotations__.items():
                yield owner_name, name, str(text)


def test_every_enum_bearing_name_carries_its_enum():
    wrong = []
    for module in _modules():
        for owner, name, text in _annotations(module):
            enum = ENUM_NAMES.get(name)
            if enum is None or (module.__name__, owner, name) in NOT_ENUMS:
                continue
            if TEXT.search(text) or enum not in text:
                wrong.append(f"{module.__name__}.{owner}: {name}: {text} (want {enum})")
    assert wrong == []


def test_the_check_sees_what_it_must_refuse():
    """The walk reads annotations as text: a str-typed strategy would be found."""

    class Probe:
        strategy: str

    assert TEXT.search(str(Probe.__annotations__["strategy"]))
    found = {(owner, name) for owner, name, _ in _annotations(etj.api.plan)}
    assert ("ShardPlan", "strategy") in found and ("TablePlan", "dtype") in found
