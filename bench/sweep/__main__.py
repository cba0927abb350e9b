import sys

from bench.sweep.run import main

sys.exit(main())
