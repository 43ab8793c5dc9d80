"""etj.core.reconcile.policies.peerloss, through ``decide``: a replica that exited 138 (the
trainer's "a peer is unavailable") in the pass that sees a peer of its group lost with its
node failed because of that loss, a disruption: not counted against backoffLimit (the
chaos soak on kind counted a ParameterServer chief's 138 after its ps' node stopped). A
138 with no peer lost, a watchdog's 138, a crash beside the loss and a loss outside the
replica's group still count. A 138 counted before its peer is seen lost (the soak's order)
is refunded when the loss is seen within the node-loss window; past it, it stays counted
and is forgotten."""

from __future__ import annotations

from etj.api.roles import Role
from etj.api.status import Phase
from etj.api.trainer_reasons import EXIT_RETRYABLE, REASON_WATCHDOG
from etj.core.reconcile.decision import iso
from tests.unit.reconcile_helpers import all_pods, later, make_job, pod, run, with_status

LOST = {"node_lost": True, "disrupted": True, "terminating": True, "node_name": "worker-2"}


def _world(job, **changed):
    """The job's pods, those named in ``changed`` (a name: its PodState) replaced."""
    return [changed.get(p.name.replace("-", "_").removeprefix("j_"), p) for p in all_pods(job)]


def test_a_chief_that_exited_138_beside_a_ps_lost_with_its_node_is_not_counted():
    job = make_job(runPolicy={"backoffLimit": 1}, status={"phase": "Running", "restarts": 1})
    d = run(
        job,
        _world(
            job,
            chief_0=pod(Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE),
            ps_0=pod(Role.PS, 0, **LOST),
        ),
    )
    # backoffLimit is used up: counted, the job would have failed.
    assert d.status is not None and d.status.phase == Phase.RESTARTING
    assert d.status.restarts == 1
    assert "j-chief-0" in d.status.restarting_pods and "j-ps-0" in d.status.restarting_pods
    (restarting,) = [e for e in d.events if e.reason == "Restarting"]
    assert "j-chief-0 exited 138 (a peer unavailable) with j-ps-0 lost" in restarting.message
    assert "not counted against backoffLimit" in restarting.message


def test_a_chief_that_exits_138_after_its_lost_ps_restarted_it_is_not_counted():
    # The pass before saw ps 0 lost and restarted it with the chief (not counted); the
    # chief's own end (138, its ps gone) comes after: part of the same restart.
    job = make_job(runPolicy={"backoffLimit": 1}, status={"phase": "Running", "restarts": 1})
    first = run(job, _world(job, ps_0=pod(Role.PS, 0, **LOST)))
    assert first.status is not None and first.status.restarts == 1
    chief = pod(Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE, terminating=True)
    then = run(with_status(job, first), _world(job, chief_0=chief, ps_0=pod(Role.PS, 0, **LOST)))
    assert then.status is not None and then.status.restarts == 1
    assert then.status.phase == Phase.RESTARTING


def test_a_worker_of_a_mirrored_job_that_exited_138_beside_a_lost_worker_is_not_counted():
    job = make_job("MultiWorkerMirrored", workers=3, status={"phase": "Running"})
    d = run(
        job,
        _world(
            job,
            worker_0=pod(Role.WORKER, 0, "Failed", exit_code=EXIT_RETRYABLE),
            worker_2=pod(Role.WORKER, 2, **LOST),
        ),
    )
    assert d.status is not None and d.status.restarts == 0


def test_what_a_lost_peer_does_not_explain_still_counts():
    job = make_job(status={"phase": "Running"})
    lost_ps = pod(Role.PS, 0, **LOST)
    # A 138 with no peer lost (the chief's own cluster trouble, a ps that crashed and is
    # not seen yet): counted, as any failure.
    alone = run(job, _world(job, chief_0=pod(Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE)))
    assert alone.status is not None and alone.status.restarts == 1
    # The watchdog's 138: a hang, whatever else happened.
    hung = pod(
        Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE, message=f"{REASON_WATCHDOG}: no step"
    )
    d = run(job, _world(job, chief_0=hung, ps_0=lost_ps))
    assert d.status is not None and d.status.restarts == 1
    # A crash (1 under OnFailure, a SIGKILL's 137) beside the loss: its own failure.
    for code in (1, 137):
        crashed = pod(Role.CHIEF, 0, "Failed", exit_code=code)
        d = run(make_job(runPolicy={"restartPolicy": "OnFailure"}, status={"phase": "Running"}),
                _world(job, chief_0=crashed, ps_0=lost_ps))  # fmt: skip
        assert d.status is not None and d.status.restarts == 1, code
    # A worker under ParameterServer lost with its node restarts alone: the chief is not in
    # its group, so its 138 beside it is not that loss's.
    d = run(
        job,
        _world(
            job,
            chief_0=pod(Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE),
            worker_1=pod(Role.WORKER, 1, **LOST),
        ),
    )
    assert d.status is not None and d.status.restarts == 1


# The chaos soak's order: the chief exits 138 within seconds of its ps' node stopping, and
# the ps is seen lost only after the node's grace and nodeLossSeconds (~50 s later). The
# chief's 138 is counted first; the loss, when seen, refunds it.
STARTED = {"started_at": later(-600)}


def _chief_138(at: float):
    return pod(
        Role.CHIEF, 0, "Failed", exit_code=EXIT_RETRYABLE, started_at=later(at - 30),
        finished_at=later(at),
    )  # fmt: skip


def _running(job):
    return [pod(p.role, p.index, "Running", **STARTED) for p in all_pods(job)]


def _with(pods, *changed):
    by_key = {p.key: p for p in changed}
    return [by_key.get(p.key, p) for p in pods]


def test_a_138_counted_before_its_peer_is_seen_lost_is_refunded_by_the_loss():
    job = make_job(runPolicy={"backoffLimit": 3}, status={"phase": "Running"})
    first = run(job, _with(_running(job), _chief_138(0)), now=later(2))
    assert first.status is not None and first.status.restarts == 1
    (kept,) = first.status.retryable_restarts
    assert kept.pods == ["j-chief-0"] and kept.time == iso(later(0))
    # The chief's replacement runs (and exits 138 again: counted again, remembered too).
    job = with_status(job, first)
    # (the chief's group, it and the workers, made again after the 10 s back-off)
    ps_only = [p for p in _running(job) if p.role == Role.PS]
    made = run(job, ps_only, now=later(13))
    assert made.status is not None and made.status.restarting_pods == []
    job = with_status(job, made)
    again = run(job, _with(_running(job), _chief_138(20)), now=later(21))
    assert again.status is not None and again.status.restarts == 2
    assert [e.pods for e in again.status.retryable_restarts] == [["j-chief-0"]] * 2
    # At t+60 ps 0 is seen lost with its node (it had started before both): both refunded.
    job = with_status(job, again)
    lost = pod(Role.PS, 0, **LOST, **STARTED)
    d = run(job, _with(_running(job), lost), now=later(60))
    assert d.status is not None and d.status.restarts == 0
    assert d.status.retryable_restarts == []
    assert any("refunded" in e.message and "j-ps-0" in e.message for e in d.events)


def test_a_138_outside_the_loss_window_or_group_stays_counted_and_is_pruned():
    job = make_job(
        runPolicy={"backoffLimit": 3}, placement={"nodeLossSeconds": 30},
        status={"phase": "Running"},
    )  # fmt: skip
    first = run(job, _with(_running(job), _chief_138(0)), now=later(2))
    job = with_status(job, first)
    # A worker under ParameterServer lost with its node restarts alone: not the chief's.
    worker = run(job, _with(_running(job), pod(Role.WORKER, 0, **LOST, **STARTED)), now=later(30))
    assert worker.status is not None and worker.status.restarts == 1
    assert len(worker.status.retryable_restarts) == 1
    # A ps that started after the chief's 138 (a replacement) was not what it lacked.
    young = pod(Role.PS, 0, **LOST, started_at=later(1))
    d = run(job, _with(_running(job), young), now=later(30))
    assert d.status is not None and d.status.restarts == 1
    # Past the window (the node's grace, nodeLossSeconds and the passes' latency): kept
    # counted, and forgotten: the list stays bounded.
    quiet = run(job, _running(job), now=later(600))
    assert quiet.status is not None and quiet.status.restarts == 1
    assert quiet.status.retryable_restarts == []
    d = run(job, _with(_running(job), pod(Role.PS, 0, **LOST, **STARTED)), now=later(600))
    assert d.status is not None and d.status.restarts == 1


def test_a_restart_counted_for_a_crash_beside_a_138_is_not_remembered():
    job = make_job(runPolicy={"backoffLimit": 3, "restartPolicy": "OnFailure"},
                   status={"phase": "Running"})  # fmt: skip
    crashed = pod(Role.WORKER, 0, "Failed", exit_code=1, finished_at=later(0))
    d = run(job, _with(_running(job), _chief_138(0), crashed), now=later(2))
    assert d.status is not None and d.status.restarts == 1
    assert d.status.retryable_restarts == []
