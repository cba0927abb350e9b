"""`python -m simulator --model y.om ...`: the same as the `atc-sim` console command."""
import sys

from simulator.cli import main

sys.exit(main())
