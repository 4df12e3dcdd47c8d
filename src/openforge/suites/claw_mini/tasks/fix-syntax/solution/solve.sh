#!/bin/sh
set -e
printf 'import sys\nprint(int(sys.argv[1]) + int(sys.argv[2]))\n' > add.py
