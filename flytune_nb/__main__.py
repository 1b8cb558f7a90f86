"""``python -m flytune_nb ...`` is the ``flytune`` command."""
import sys

from flytune_nb.ui.cli import main

sys.exit(main())
