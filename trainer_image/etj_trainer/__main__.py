"""Entry point of ``python -m etj_trainer``: the process ends with ``ending.end`` (at once,
without tearing TensorFlow down: see etj_trainer.ending)."""

from etj_trainer.ending import end
from etj_trainer.main import main

if __name__ == "__main__":
    end(main())
