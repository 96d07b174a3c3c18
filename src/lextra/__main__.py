"""`python -m lextra` runs the command-line interface."""

from lextra.cli import main

raise SystemExit(main())
