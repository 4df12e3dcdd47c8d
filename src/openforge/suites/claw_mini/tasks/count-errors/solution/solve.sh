#!/bin/sh
set -e
grep -c ERROR app.log > errors.txt
