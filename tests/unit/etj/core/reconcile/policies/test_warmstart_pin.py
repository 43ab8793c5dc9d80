"""etj.core.reconcile.policies.warmstart_pin: the warm-start step runs only before the first
pod of a job whose warm start is not pinned; it waits, refuses (the job fails) or pins."""

from __future__ import annotations

from etj.api.reasons import (
    REASON_SOURCE_RESOLVED,
    REASON_WAITING_FOR_SOURCE,
    REASON_WARM_START_REFUSED,
)
from etj.api.status import ConditionType, Phase
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.warmstart_pin import (
    AFTER_PIN_SECONDS,
    pin_warm_start,
    warm_start_pending,
)
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.etj.core.reconcile.test_decide_warmstart import source, warm
from tests.unit.reconcile_helpers import make_job, pod


def test_only_a_job_with_an_unpinned_warm_start_and_no_pod_is_pending():
    assert warm_start_pending(_Pass(_world(warm())))
    assert not warm_start_pending(_Pass(_world(make_job())))
    assert not warm_start_pending(_Pass(_world(warm(), pods=[pod("chief", 0)])))
    assert not pin_warm_start(_Pass(_world(make_job())))


def test_a_running_source_is_waited_for():
    p = _Pass(_world(warm(), jobs=[source("Running")]))
    assert pin_warm_start(p)
    assert p.st.phase == Phase.PENDING and p.d.create_pods == []
    (c,) = [c for c in p.st.conditions if c.type == ConditionType.WARM_STARTED]
    assert (c.status, c.reason) == ("False", REASON_WAITING_FOR_SOURCE)


def test_a_failed_source_fails_the_job():
    p = _Pass(_world(warm(), jobs=[source("Failed")]))
    assert pin_warm_start(p)
    assert p.st.phase == Phase.FAILED
    assert [e.reason for e in p.d.events] == [REASON_WARM_START_REFUSED]


def test_a_succeeded_source_is_pinned_and_the_pods_come_next():
    p = _Pass(_world(warm(), jobs=[source()]))
    assert pin_warm_start(p)
    assert p.st.warm_start is not None and p.st.warm_start.source_job == "day-1"
    assert [e.reason for e in p.d.events] == [REASON_SOURCE_RESOLVED]
    assert p.d.requeue_after == AFTER_PIN_SECONDS and p.d.create_pods == []
