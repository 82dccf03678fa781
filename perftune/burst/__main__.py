"""``python -m perftune.burst TRIAL_DIR``: one burst (see ``perftune.burst.main``)."""

import sys

from perftune.burst.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
