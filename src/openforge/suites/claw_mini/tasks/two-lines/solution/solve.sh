#!/bin/sh
set -e
printf 'alpha\nbeta\n' > lines.txt
