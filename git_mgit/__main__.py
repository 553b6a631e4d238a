import sys

from git_mgit.cli import main

sys.exit(main())
