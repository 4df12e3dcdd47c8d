#!/bin/sh
set -e
sed -i 's/open(sys.argv\[1\]).read().split()/open(sys.argv[1]).read().lower().replace(".", " ").split()/' top_word.py
