"""One module per policy, each a few pure functions with its own test module; and the
rules of ``decide`` that change one pass (``pass_state``): ``finish``, ``failures``,
``recovery``, tested through ``decide`` (tests/unit/etj/core/reconcile/test_decide*.py)."""
