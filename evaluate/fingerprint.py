"""`python3 -m evaluate.fingerprint`: the fingerprints that prove two runs did the same work, from the command line.

The code lives in the domain core (utils.fingerprint), which train/ and data/ use too; this is the command users type.
"""

import sys

from utils.fingerprint import main

if __name__ == "__main__":
    sys.exit(main())
