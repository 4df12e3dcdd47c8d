#!/bin/sh
set -e
grep -l SECRET_TOKEN -r docs > found.txt
