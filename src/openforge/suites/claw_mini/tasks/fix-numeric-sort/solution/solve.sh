#!/bin/sh
set -e
printf 'import sys\n\nprint(" ".join(str(x) for x in sorted(int(a) for a in sys.argv[1:])))\n' > sort_nums.py
