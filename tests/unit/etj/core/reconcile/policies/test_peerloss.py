"""etj.core.reconcile.policies.peerloss, through ``decide``: a replica that exited 138 (the
trainer's "a peer is unavailable") in the pass that sees a peer of its group lost with its
node failed because of that loss, a disruption: not counted against backoffLimit (the
chaos soak on kind counted a ParameterServer chief's 138 after its ps' node stopped). A
138 with no peer lost, a watchdog's 138, a crash beside the loss and a loss outside the
replica's group still count."""

from __future__ import annotations

from etj.api.roles import Role
from etj.api.status import Phase
from etj.api.trainer_reasons import EXIT_RETRYABLE, REASON_WATCHDOG
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

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
