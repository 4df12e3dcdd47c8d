#!/bin/sh
set -e
find src -name '*.py' | wc -l | tr -d ' ' > n.txt
