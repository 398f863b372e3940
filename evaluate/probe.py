"""`python3 -m evaluate.probe`: the system description, from the command line.

The code lives in the domain core (utils.machine.probe), which train/ and data/ use too; this is the command users type.
"""

import sys

from utils.machine.probe import main

if __name__ == "__main__":
    sys.exit(main())
