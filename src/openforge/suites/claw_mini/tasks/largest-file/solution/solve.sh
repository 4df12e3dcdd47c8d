#!/bin/sh
set -e
ls -S files | head -n 1 > largest.txt
