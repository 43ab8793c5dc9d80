"""policies/claim.py: when an existing checkpoint claim of the job's name may be mounted."""

from __future__ import annotations

from typing import Any

from etj.core.reconcile.policies.claim import claim_wait


def claim(**metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "ctr-checkpoints", **metadata}}


def owned_by(uid: str) -> list[dict[str, Any]]:
    return [{"kind": "EmbeddingTrainingJob", "name": "ctr", "uid": uid}]


def test_this_jobs_own_claim_and_a_retained_one_are_mounted():
    assert claim_wait(claim(ownerReferences=owned_by("u-1")), "u-1") is None
    assert claim_wait(claim(), "u-1") is None
    assert claim_wait(claim(ownerReferences=[]), "u-1") is None


def test_an_earlier_jobs_claim_is_waited_for_naming_it():
    why = claim_wait(claim(ownerReferences=owned_by("u-0")), "u-1")
    assert why == (
        "claim ctr-checkpoints belongs to an earlier job of this name (uid u-0), being deleted"
    )


def test_a_claim_being_deleted_is_waited_for_even_if_it_is_this_jobs():
    why = claim_wait(claim(ownerReferences=owned_by("u-1"), deletionTimestamp="t"), "u-1")
    assert why is not None and "being deleted" in why


def test_owners_of_other_kinds_do_not_count():
    other = [{"kind": "ConfigMap", "name": "x", "uid": "u-9"}]
    assert claim_wait(claim(ownerReferences=other), "u-1") is None
