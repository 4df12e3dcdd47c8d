#!/bin/sh
set -e
tr a-z A-Z < name.txt > upper.txt
