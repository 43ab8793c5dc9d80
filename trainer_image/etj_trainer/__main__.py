"""Entry point of ``python -m etj_trainer``."""

import sys

from etj_trainer.main import main

if __name__ == "__main__":
    sys.exit(main())
