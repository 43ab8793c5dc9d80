"""The trainer's exit codes: which are retried."""

from __future__ import annotations

from etj_trainer import exitcodes


def test_exit_code_classes() -> None:
    assert not exitcodes.is_retryable(exitcodes.BUG)
    assert not exitcodes.is_retryable(exitcodes.USAGE)
    assert exitcodes.is_retryable(exitcodes.RETRYABLE)
    assert exitcodes.is_retryable(exitcodes.TERMINATED)
