"""The operator's diff-base storage builds no essence: safe only while nothing of the
operator's reads kopf's diff, which this test keeps so."""

from __future__ import annotations

import kopf

import etj.controller.handlers  # noqa: F401  (registers the handlers)
from etj.controller.handlers import NoEssenceStorage

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "j-worker-0", "namespace": "n", "labels": {"a": "b"}},
    "spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}]}]},
    "status": {"phase": "Running"},
}


def test_no_handler_of_the_operator_reads_kopfs_diff():
    registry = kopf.get_default_registry()
    # Changing handlers (on.create/update/delete/resume/field) get the diff; with one of
    # them, every object would look unchanged to it.
    assert registry._changing.get_all_handlers() == []
    # Idle timers and daemons restart their idling on an essential change only.
    spawning = registry._spawning.get_all_handlers()
    assert [h.id for h in spawning] == ["job_loop"]
    assert all(getattr(h, "idle", None) is None for h in spawning)
    # Only what the storage ignores: no handler asks for extra fields of the essence.
    for handler in registry._watching.get_all_handlers():
        assert handler.field is None
        assert handler.value is None


def test_every_object_looks_unchanged_and_nothing_is_stored():
    storage = NoEssenceStorage()
    body = kopf.Body(POD)
    assert storage.build(body=body) == {} == storage.fetch(body=body)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=kopf.BodyEssence({"spec": {}}))
    assert not patch
