import sys

from reinforge.cli import main

sys.exit(main())
