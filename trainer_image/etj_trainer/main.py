"""``python -m etj_trainer [--config PATH]``: what this process is comes from TF_CONFIG,
what to train from the trainer config (``--config`` wins over ``ETJ_TRAINER_CONFIG``).

Checks everything it can before TensorFlow is imported (bad config or TF_CONFIG: exit 2
with a message naming the field), then dispatches to the role, and maps whatever escapes
training to an exit code the operator's restart policy understands (see ``exitcodes``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from etj.api.constants import LEGACY_KERAS_ENV, TF_CONFIG_ENV
from etj.api.roles import Role
from etj.api.spec import Strategy
from etj.api.trainer_reasons import REASON_MODEL_ERROR
from etj_trainer import exitcodes
from etj_trainer.config import ConfigError, load_config, metrics_port
from etj_trainer.ending import keep
from etj_trainer.task.cluster import ClusterError, Task, check_strategy, parse_tf_config
from etj_trainer.task.termination import report_failure, write_termination_message

log = logging.getLogger(__name__)


def _tf_environment() -> None:
    # tf_keras (never Keras 3) if anything pulls Keras in; TensorFlow's C++ INFO chatter off.
    os.environ.setdefault(LEGACY_KERAS_ENV, "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m etj_trainer",
        description="etj trainer: one replica (chief, worker, ps) of an EmbeddingTrainingJob.",
    )
    parser.add_argument(
        "--config", help="trainer config JSON (default: $ETJ_TRAINER_CONFIG)", default=None
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # argparse: --help is 0, a bad flag is a usage error
        return exitcodes.SUCCESS if e.code == 0 else exitcodes.USAGE
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config(args.config)
        task = parse_tf_config(os.environ.get(TF_CONFIG_ENV))
        check_strategy(task, config.strategy)
        port = metrics_port(config)
    except (ConfigError, ClusterError) as e:
        print(f"etj_trainer: {e}", file=sys.stderr)
        write_termination_message(e.reason, str(e))
        return exitcodes.USAGE
    _tf_environment()
    if _trains(config.strategy, task) and not os.environ.get("ETJ_NO_SUPERVISOR"):
        parent = os.environ.get("ETJ_SUPERVISOR_PID")
        if parent is None:
            from etj_trainer.task.supervisor import supervise

            # The training process runs under a watchdog parent (see etj_trainer.task.supervisor).
            return supervise(
                [sys.executable, "-m", "etj_trainer", *(argv or sys.argv[1:])],
                config.watchdog_seconds,
            )
        from etj_trainer.task.supervisor import die_with_parent, install_stack_dump

        die_with_parent(int(parent))
        install_stack_dump()
    return run(config, task, port)


def _trains(strategy: Strategy, task: Task) -> bool:
    """Whether this task runs the training loop (and so needs the watchdog)."""
    if task.type in (Role.PS, Role.EVALUATOR):
        return False
    return not (
        strategy == Strategy.PARAMETER_SERVER and task.distributed and task.type == Role.WORKER
    )


def run(config: object, task: Task, port: int) -> int:
    from etj.api.disk import disk_of
    from etj.api.trainer import TrainerConfig

    assert isinstance(config, TrainerConfig)
    ps = config.strategy == Strategy.PARAMETER_SERVER and task.distributed
    try:
        from etj_trainer.task import roles  # TensorFlow loads here, after the config is known good

        log.info("task %s, strategy %s", task, config.strategy if task.distributed else "local")
        if ps and task.type in (Role.PS, Role.WORKER):
            # A table on disk runs the trainer's own kernels on the ps (and in the functions
            # a worker runs): they are loaded before the server starts.
            return roles.run_server(task, kernels=any(disk_of(t) for t in config.model.tables))
        if task.type == Role.EVALUATOR:
            from etj_trainer.task.evaluate import run_evaluator

            return run_evaluator(config, task)
        if task.type == Role.PS:
            print("etj_trainer: a ps task needs strategy ParameterServer", file=sys.stderr)
            return exitcodes.USAGE
        if ps:
            return roles.run_ps_chief(config, task, port)
        return roles.run_synchronous(config, task, port if task.is_leader() else None)
    except KeyboardInterrupt as e:
        keep(e)
        return exitcodes.TERMINATED
    except BaseException as e:
        # Its traceback holds the role's frames: kept, so that nothing they built is torn
        # down while a peer is gone (etj_trainer.ending).
        keep(e)
        return _failed(e, ps)


def _failed(error: BaseException, ps: bool) -> int:
    from etj_trainer.data.records import data_error_from
    from etj_trainer.task.loop import classify
    from etj_trainer.task.termination import exception_chain, failure_reason, permanent_failure

    # A failure no restart cures (etj.api.trainer_reasons.PERMANENT_TRAINER_REASONS: the config
    # does not match the data or the checkpoint, or the job's own model code cannot be
    # used) is reported as itself, whatever TensorFlow wrapped it in: autograph's
    # StagingError when raised while a (dataset) function was traced (ParameterServer's
    # coordinator traces the per-worker dataset function), an InvalidArgumentError
    # carrying a pipeline check's text or a py_function's traceback, a worker's error
    # re-raised by the coordinator. The operator fails the job on it at once.
    permanent = permanent_failure(error, data_error_from)
    if permanent:
        reason, message = permanent
        causes = [e.__cause__ for e in exception_chain(error) if failure_reason(e) == reason]
        cause = next((c for c in causes if c is not None), None)
        if reason == REASON_MODEL_ERROR and cause is not None:
            # The user's own traceback, for the log (the message has the cause in one line).
            traceback.print_exception(cause)
        print(f"etj_trainer: {reason}: {message}", file=sys.stderr)
        report_failure(reason, message, exitcodes.USAGE)
        return exitcodes.USAGE
    reason = failure_reason(error)
    code = classify(error, ps)
    kind = "retryable" if code == exitcodes.RETRYABLE else "permanent"
    log.error("training failed (%s, exit %d): %s: %s", kind, code, reason, str(error)[:2000])
    if code != exitcodes.RETRYABLE:
        traceback.print_exc()
    # The reason is the error's (its class's name for a foreign one); the message is what it says.
    report_failure(reason, str(error).strip() or reason, code)
    return code
